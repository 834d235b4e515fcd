package store

import (
	"context"
	"errors"
)

// ErrFenced refuses a write made under a lease that is no longer held with
// its token: it expired and another holder (another server, maybe) took the
// project over, or it was released. Nothing of the write is kept.
var ErrFenced = errors.New("the project's lease is no longer held with this token: another holder took over")

// Fence names the lease a write is made under: the project and the token of
// one acquisition.
type Fence struct {
	Project string
	Token   string
}

type fenceKey struct{}

// WithFence returns a context whose store writes are fenced by f: each
// checks, in its own transaction, that f's lease is still held with f's
// token, and fails with ErrFenced otherwise. A server paused past its lease
// (GC, SIGSTOP) so cannot write over the work of the one that took over,
// whatever the clocks say. Lease operations themselves are not fenced.
func WithFence(ctx context.Context, f Fence) context.Context {
	return context.WithValue(ctx, fenceKey{}, f)
}

// FenceOf returns the fence of ctx, if it has one.
func FenceOf(ctx context.Context) (Fence, bool) {
	f, ok := ctx.Value(fenceKey{}).(Fence)
	return f, ok
}
