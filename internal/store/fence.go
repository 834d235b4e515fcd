package store

import (
	"context"
	"errors"
)

// ErrFenced refuses a write made under a lease that is no longer held with
// its token: it expired by the store's clock (the database's now() on
// PostgreSQL), another holder (another server, maybe) took it over, or it
// was released. Nothing of the write is kept.
var ErrFenced = errors.New("fenced: the lease this write is made under is no longer held with its token: it expired or another holder took over")

// LoopsLease is the key, in the leases of Leases, of the lease of the
// control plane's background loops (liveness, auto-revert, rescheduling,
// blob collection): the one server holding it runs them. No project is
// named so: a project's key is "<namespace>/<project>".
const LoopsLease = "hatch:loops"

// Fence names the lease a write is made under: the lease's key (a project,
// or LoopsLease) and the token of one acquisition.
type Fence struct {
	Project string
	Token   string
}

type fenceKey struct{}

// WithFence returns a context whose store writes are fenced by f, besides
// the fences ctx has already: each write checks, in its own transaction,
// that every one of its leases is still held with its token and has not
// expired by the store's clock, and fails with ErrFenced otherwise. A server
// paused past its lease (GC, SIGSTOP) so cannot write over the work of the
// one that took over, whatever its own clock says. Lease operations
// themselves are not fenced.
//
// Work of the background loops holds two: the loops' lease and, when it
// changes a project, that project's.
func WithFence(ctx context.Context, f Fence) context.Context {
	fences := Fences(ctx)
	return context.WithValue(ctx, fenceKey{}, append(fences[:len(fences):len(fences)], f))
}

// Fences returns the fences of ctx, outermost first.
func Fences(ctx context.Context) []Fence {
	f, _ := ctx.Value(fenceKey{}).([]Fence)
	return f
}
