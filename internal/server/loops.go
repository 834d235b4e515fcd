package server

import "context"

// BackgroundLoop is work run by the one server running the background
// loops, on a context fenced by their lease, until that context ends.
type BackgroundLoop interface {
	Run(ctx context.Context)
}
