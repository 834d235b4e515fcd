// Package leader elects the one control-plane server that runs the
// background loops (liveness, auto-revert, rescheduling, blob collection):
// the holder of the store's store.LoopsLease, a lease row beside the
// projects' leases, taken for a term measured by the store's clock (the
// database's now() on PostgreSQL) and renewed every third of it.
//
// The loops run on a context fenced by the lease (store.WithFence): every
// write they make checks, in its own transaction, that the lease is still
// held with this acquisition's token and unexpired. A holder that dies or is
// paused past its term is replaced by another server within one term and
// one retry; once it wakes, its loop writes are refused (store.ErrFenced)
// and its next renewal finds the lease gone, which stops its loops.
//
// Why a lease row and not a PostgreSQL advisory lock: a session-level
// advisory lock is held for as long as its connection lives, so a server
// paused by SIGSTOP or a GC keeps it (its TCP connection stays open) and
// nobody takes over; and no write can be fenced by it, for it has no token
// to check and no expiry by the database's clock. The row has both, works
// the same on SQLite, and reuses the projects' lease and fence code.
package leader

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/store"
)

// DefaultTTL is the loops' lease term: a holder that dies is replaced
// within it plus a third of it (the others' retry).
const DefaultTTL = 6 * time.Second

// Deps are what an Elector works with; every one is required.
type Deps struct {
	Leases store.Leases
	// ServerID names this server in the lease (the same one the projects'
	// leases carry): a restarting server releases what its previous life
	// held, the loops' lease included.
	ServerID string
	Logger   *zap.Logger
}

// The lease's Since and Expires are taken from time.Now, the clock SQLite's
// fence checks them by (its one server's); PostgreSQL measures them by its
// own now(), and only their difference, the term, counts.

// Elector takes the loops' lease whenever it is free or expired, and runs
// the loops while it holds it.
type Elector struct {
	ttl  time.Duration
	deps Deps
	log  *zap.Logger

	leading  prometheus.Gauge
	takes    prometheus.Counter
	losses   prometheus.Counter
	mu       sync.Mutex // guards isLeader
	isLeader bool

	firstTry     chan struct{} // closed once the first try settled
	firstTryOnce sync.Once
}

// New returns an elector whose lease lasts ttl unless renewed.
func New(ttl time.Duration, deps Deps) (*Elector, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("leader: the loops' lease term must be positive, not %v", ttl)
	}
	if deps.Leases == nil || deps.Logger == nil || deps.ServerID == "" {
		return nil, errors.New("leader: every dependency must be set")
	}
	return &Elector{ttl: ttl, deps: deps, log: deps.Logger.With(zap.String("component", "leader")),
		leading: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hatch_loops_leader",
			Help: "1 while this server holds the lease of the background loops and runs them, else 0.",
		}),
		takes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hatch_loops_taken_total",
			Help: "Times this server took the lease of the background loops.",
		}),
		losses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hatch_loops_lost_total",
			Help: "Times this server lost the lease of the background loops before its stop (expired, taken over, or not renewed in time).",
		}),
		firstTry: make(chan struct{})}, nil
}

// Collectors are the elector's Prometheus collectors.
func (e *Elector) Collectors() []prometheus.Collector {
	return []prometheus.Collector{e.leading, e.takes, e.losses}
}

// FirstTry is closed once Run's first try to take the lease settled: it was
// held by another server, or it was taken and the loops began (or failed
// to), or Run ended.
func (e *Elector) FirstTry() <-chan struct{} { return e.firstTry }

func (e *Elector) settled() { e.firstTryOnce.Do(func() { close(e.firstTry) }) }

// Leading reports whether this server runs the loops now.
func (e *Elector) Leading() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.isLeader
}

func (e *Elector) setLeading(on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.isLeader = on
	if on {
		e.leading.Set(1)
	} else {
		e.leading.Set(0)
	}
}

// Begin begins the loops, on a context fenced by the lease, and returns
// what runs them until its context ends; an error gives the lease back.
type Begin func(ctx context.Context) (run func(ctx context.Context), err error)

// Run takes the loops' lease whenever it can, begins the loops and runs them
// on a context fenced by it until the lease is lost, then tries again, until
// ctx ends: it then stops the loops, waits for them and releases the lease,
// so another server takes over at once.
func (e *Elector) Run(ctx context.Context, begin Begin) {
	defer e.settled()
	retry := e.ttl / 3
	for {
		held, err := e.acquire(ctx)
		switch {
		case err == nil:
			e.lead(ctx, held, begin)
		case errors.Is(err, store.ErrLocked):
		case ctx.Err() == nil:
			e.log.Warn("the loops' lease not taken; retrying", zap.Error(err))
		}
		e.settled()
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
	}
}

func (e *Elector) acquire(ctx context.Context) (store.Lease, error) {
	now := time.Now()
	return e.deps.Leases.AcquireLease(ctx, store.Lease{Project: store.LoopsLease, Token: newToken(), Holder: "background loops",
		Server: e.deps.ServerID, Since: now, Expires: now.Add(e.ttl)})
}

// lead begins and runs the loops while held is renewed, and returns once it
// is lost or ctx ends.
func (e *Elector) lead(ctx context.Context, held store.Lease, begin Begin) {
	log := e.log.With(zap.String("token", held.Token[:8]))
	loopCtx, stop := context.WithCancel(store.WithFence(ctx, store.Fence{Project: store.LoopsLease, Token: held.Token}))
	defer stop()
	release := func() {
		relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := e.deps.Leases.ReleaseLease(relCtx, store.LoopsLease, held.Token); err != nil {
			log.Warn("the loops' lease not released (it expires by itself)", zap.Error(err))
		}
	}
	run, err := begin(loopCtx)
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("the background loops did not begin; their lease is given back", zap.Error(err))
		}
		release()
		return
	}
	log.Info("took the background loops (liveness, auto-revert, rescheduling, blob collection)",
		zap.Duration("lease", e.ttl), zap.Time("expires", held.Expires))
	e.takes.Inc()
	e.setLeading(true)
	e.settled()
	done := make(chan struct{})
	go func() { defer close(done); run(loopCtx) }()
	why := e.renew(ctx, held, log)
	stop()
	<-done
	e.setLeading(false)
	if ctx.Err() != nil {
		// A stop: hand the loops over at once rather than at the expiry.
		release()
		log.Info("stopped the background loops: this server stops")
		return
	}
	e.losses.Inc()
	log.Warn("lost the background loops: " + why + "; their writes are refused from now on, and another server runs them")
}

// renew renews the lease every third of its term until ctx ends (it returns
// "") or the lease is lost (it says why). A renewal that fails for another
// reason is retried, but once a whole term passed since the last one that
// succeeded, the lease is given up: it has expired by now, as the store
// would tell a fenced write.
func (e *Elector) renew(ctx context.Context, held store.Lease, log *zap.Logger) string {
	t := time.NewTicker(e.ttl / 3)
	defer t.Stop()
	last := time.Now() // monotonic: a pause of the process counts
	for {
		select {
		case <-ctx.Done():
			return ""
		case <-t.C:
		}
		start := time.Now()
		err := e.deps.Leases.RenewLease(ctx, store.LoopsLease, held.Token, time.Now().Add(e.ttl))
		switch {
		case err == nil:
			last = start
		case errors.Is(err, store.ErrNotFound):
			return "another server took them over, or they were released"
		case ctx.Err() != nil:
			return ""
		default:
			log.Warn("the loops' lease not renewed; retrying", zap.Error(err))
			if time.Since(last) >= e.ttl {
				return fmt.Sprintf("not renewed for %v, its whole term", time.Since(last).Round(time.Millisecond))
			}
		}
	}
}

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
