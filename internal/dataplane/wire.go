package dataplane

import (
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/ingress"
)

// The control API's paths, declared once for the server and the Client.
const (
	pathVersion     = "/v1/version"
	pathStatus      = "/v1/status"
	pathTable       = "/v1/table"
	pathProblem     = "/v1/problem"
	pathPeers       = "/v1/peers"
	pathDrain       = "/v1/drain/" // + container ID
	pathGone        = "/v1/gone/"  // + container ID
	pathReloadCerts = "/v1/reload-certs"
	pathStop        = "/v1/stop"
	pathHandover    = "/v1/handover"
	pathFenceLease  = "/v1/fence-lease"
)

// Version is who serves the socket: the binary's hash (an agent on another
// binary upgrades it in place), its process and the Config it serves.
type Version struct {
	Binary string
	PID    int
	Config Config
}

// Status is what the agent reads back: the ingress's ACME challenges and
// HTTPS problem for its report, and the addresses listened on (a port 0 in
// the Config is chosen by the kernel).
type Status struct {
	Challenges   []string
	HTTPSProblem string
	// HTTP, HTTPS, Admin and Mesh are the listening addresses ("" for
	// none).
	HTTP, HTTPS, Admin, Mesh string
}

// State is what the agent set, handed on to a successor with the
// listeners, so that it serves the same table from its first request.
type State struct {
	Table   *ingress.Table // nil before the first table
	Problem string
	Peers   []contract.Peer
	// Fenced are the containers drained and not reported gone since: they
	// must not rejoin the pool in the successor either.
	Fenced []string
	// Lease is the agent's last fence lease (nil: none): a successor
	// enforces it as its predecessor would have (deadman.go).
	Lease *FenceLease
}

// handoverHeader precedes the handed-on descriptors' meaning: Keys[i] is
// the listenerSet key of the i-th descriptor after the lock file's.
type handoverHeader struct {
	Keys  []string
	State State
}
