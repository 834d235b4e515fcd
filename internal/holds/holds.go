// Package holds is the one registry of what the control plane holds open for
// whom: every long-lived stream and long-poll is held under its principal
// (an admin token, a host; later a dashboard session or a deploy token) and
// an endpoint, so that two rules are kept in one place:
//
//   - A principal holds at most a few of an endpoint's at once (its Limit):
//     a new one replaces the oldest, which is ended at once. A host that
//     opens 5,000 polls holds two; an agent whose old connection died
//     unnoticed is not refused its new one.
//   - When the right ends (a token revoked, a host removed), End ends every
//     one the principal holds, whatever the endpoint.
//
// The registry does no I/O and knows nothing of HTTP: a holder selects on
// its Hold's Done channel beside its own, and answers by its Cause. Who
// decides that a right ended (the server's re-check of the store) calls End.
// It is safe for concurrent use.
package holds

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Kind is the kind of principal something is held for.
type Kind string

// The kinds of principal. A new kind (a deploy token, a dashboard session)
// is a new constant; the registry treats every kind alike.
const (
	// AdminToken is a named admin token; its ID is the name (unique
	// forever, so a revoked name never comes back).
	AdminToken Kind = "admin-token"
	// Host is a host's own token; its ID is the host ID.
	Host Kind = "host"
	// DeployToken is a project's deploy token; its ID is the name (unique
	// forever among named tokens, admin ones included).
	DeployToken Kind = "deploy-token"
)

// Principal is who holds: a kind and an ID unique within it.
type Principal struct {
	Kind Kind
	ID   string
}

// AdminTokenNamed is the principal of the admin token with the name.
func AdminTokenNamed(name string) Principal { return Principal{Kind: AdminToken, ID: name} }

// DeployTokenNamed is the principal of the deploy token with the name.
func DeployTokenNamed(name string) Principal { return Principal{Kind: DeployToken, ID: name} }

// HostID is the principal of the host with the ID.
func HostID(id string) Principal { return Principal{Kind: Host, ID: id} }

func (p Principal) String() string { return string(p.Kind) + " " + p.ID }

// Endpoint names what is held (a route's long-poll or stream), as its
// holder names it.
type Endpoint string

// Scope is a kind of principal on an endpoint: what a Limit applies to.
type Scope struct {
	Kind     Kind
	Endpoint Endpoint
}

// Limits are how many holds one principal of a kind may have on an
// endpoint at once; a scope not listed (or 0) is unbounded, for streams
// already bounded elsewhere or held only to be ended with their right.
type Limits map[Scope]int

// ErrReplaced is the cause of a hold ended because its principal opened a
// newer one on the same endpoint beyond its limit.
var ErrReplaced = errors.New("replaced by a newer one of the same principal on the same endpoint")

// Registry knows every hold by principal and endpoint.
type Registry struct {
	limits Limits

	mu sync.Mutex // guards the fields below
	// held are each principal's open holds per endpoint, oldest first.
	held map[Principal]map[Endpoint][]*Hold
	// holders counts the principals holding at least one of an endpoint's.
	holders map[Endpoint]int
	total   int
}

// New returns an empty registry with the limits (copied).
func New(limits Limits) (*Registry, error) {
	own := make(Limits, len(limits))
	for s, n := range limits {
		if n < 0 {
			return nil, fmt.Errorf("holds: the limit of %s on %s is %d, want 0 (none) or more", s.Kind, s.Endpoint, n)
		}
		own[s] = n
	}
	return &Registry{limits: own, held: map[Principal]map[Endpoint][]*Hold{}, holders: map[Endpoint]int{}}, nil
}

// Hold is one stream or poll held open. Its holder selects on Done, reads
// Cause once it is closed, and calls Release when it returns.
type Hold struct {
	reg       *Registry
	principal Principal
	endpoint  Endpoint
	done      chan struct{}
	cause     error // set once, before done is closed; guarded by reg.mu
	released  bool  // guarded by reg.mu
}

// Hold registers a new hold of p on e. Beyond the scope's limit the oldest
// of p's holds on e are ended (cause ErrReplaced) to make room: the newest
// always gets in.
func (r *Registry) Hold(p Principal, e Endpoint) *Hold {
	h := &Hold{reg: r, principal: p, endpoint: e, done: make(chan struct{})}
	r.mu.Lock()
	defer r.mu.Unlock()
	if limit := r.limits[Scope{p.Kind, e}]; limit > 0 {
		for open := r.held[p][e]; len(open) >= limit; open = r.held[p][e] {
			r.endLocked(open[0], ErrReplaced)
		}
	}
	byEndpoint := r.held[p]
	if byEndpoint == nil {
		byEndpoint = map[Endpoint][]*Hold{}
		r.held[p] = byEndpoint
	}
	if len(byEndpoint[e]) == 0 {
		r.holders[e]++
	}
	byEndpoint[e] = append(byEndpoint[e], h)
	r.total++
	return h
}

// End ends every hold of p, on every endpoint, with the cause (which its
// holders answer by), and returns how many it ended. Ending a principal
// holding nothing is a no-op: a hold taken after End is not ended by it
// (its holder checks the principal after taking it, so that a right ended
// in between is seen by one or the other).
func (r *Registry) End(p Principal, cause error) int {
	if cause == nil {
		cause = fmt.Errorf("%s: its right to hold this open ended", p)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, open := range r.held[p] {
		for _, h := range slices.Clone(open) {
			r.endLocked(h, cause)
			n++
		}
	}
	return n
}

// endLocked ends and unregisters h; r.mu is held.
func (r *Registry) endLocked(h *Hold, cause error) {
	if h.cause == nil {
		h.cause = cause
		close(h.done)
	}
	r.removeLocked(h)
}

// removeLocked unregisters h if it still is; r.mu is held.
func (r *Registry) removeLocked(h *Hold) {
	if h.released {
		return
	}
	h.released = true
	byEndpoint := r.held[h.principal]
	open := byEndpoint[h.endpoint]
	i := slices.Index(open, h)
	if i < 0 {
		return
	}
	open = slices.Delete(open, i, i+1)
	r.total--
	if len(open) > 0 {
		byEndpoint[h.endpoint] = open
		return
	}
	delete(byEndpoint, h.endpoint)
	if r.holders[h.endpoint]--; r.holders[h.endpoint] == 0 {
		delete(r.holders, h.endpoint)
	}
	if len(byEndpoint) == 0 {
		delete(r.held, h.principal)
	}
}

// Done is closed when the hold was ended: replaced, or its principal's
// right ended. Releasing it does not close it.
func (h *Hold) Done() <-chan struct{} { return h.done }

// Cause is why the hold was ended (ErrReplaced, or End's cause), or nil
// while it was not.
func (h *Hold) Cause() error {
	h.reg.mu.Lock()
	defer h.reg.mu.Unlock()
	return h.cause
}

// Release unregisters the hold, as its holder returns. It is idempotent,
// and a no-op after the hold was ended.
func (h *Hold) Release() {
	h.reg.mu.Lock()
	defer h.reg.mu.Unlock()
	h.reg.removeLocked(h)
}

// Principals returns the principals of the kind holding anything now,
// sorted by ID: those whose right a re-check must look at.
func (r *Registry) Principals(k Kind) []Principal {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Principal
	for p := range r.held {
		if p.Kind == k {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b Principal) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Holders returns how many distinct principals hold e now: what is spread
// by principal rather than by request (a host with many polls counts once).
func (r *Registry) Holders(e Endpoint) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.holders[e]
}

// Count returns how many holds p has on e now.
func (r *Registry) Count(p Principal, e Endpoint) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.held[p][e])
}

// Len returns how many holds are open now, over every principal.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}
