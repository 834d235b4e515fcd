// Package roster keeps the control plane's list of its live servers: each
// server registers the URL hosts and clients reach it at in the store's
// server registry, renewing it every Interval for TTL (on PostgreSQL the
// database's clock measures it), and reads back the URLs of every live
// server. Every desired-state answer carries that list, so a host follows
// the control plane as servers are added or removed, and a server that died
// drops out of it within TTL.
//
// The list is read with each renewal and kept in memory: an answer costs no
// query. A store that does not answer leaves the last list in place.
package roster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/store"
)

// Config says who this server is and how often it says so.
type Config struct {
	// ID names this server in the registry (the same after a restart).
	ID string
	// URL is where hosts and clients reach this server ("": this server is
	// not registered, and answers with the others' URLs only).
	URL string
	// Interval is how often the registration is renewed and the list read
	// (5s); TTL is how long a registration lives without renewal (15s).
	Interval, TTL time.Duration
	Logger        *zap.Logger
	// Now is the clock a SQLite registry measures by (PostgreSQL uses its own).
	Now func() time.Time
}

// DefaultConfig returns the timings `hatch server` uses.
func DefaultConfig() Config {
	return Config{Interval: 5 * time.Second, TTL: 15 * time.Second, Now: time.Now}
}

// Validate reports every setting that cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.ID == "" {
		errs = append(errs, errors.New("no server ID"))
	}
	if c.Interval <= 0 || c.TTL <= c.Interval {
		errs = append(errs, fmt.Errorf("interval %v and TTL %v: want a positive interval and a longer TTL", c.Interval, c.TTL))
	}
	if c.Logger == nil || c.Now == nil {
		errs = append(errs, errors.New("a logger and a clock are needed"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("roster: %w", err)
	}
	return nil
}

// Roster is this server's registration and the live list. Start launches
// its goroutine, Close stops it and unregisters. Servers is safe for
// concurrent use.
type Roster struct {
	cfg Config
	reg store.ServerRegistry
	log *zap.Logger

	mu   sync.Mutex // guards list and changed
	list []string
	// changed is closed (and replaced) when the list changes.
	changed chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a roster over reg; nothing runs until Start.
func New(cfg Config, reg store.ServerRegistry) (*Roster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if reg == nil {
		return nil, errors.New("roster: no server registry")
	}
	return &Roster{cfg: cfg, reg: reg, log: cfg.Logger.With(zap.String("component", "roster")), changed: make(chan struct{})}, nil
}

// Start registers this server and reads the list once (a failure is logged:
// the next renewal tries again), then renews every Interval until Close.
func (r *Roster) Start(ctx context.Context) {
	r.refresh(ctx)
	ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	r.done = make(chan struct{})
	go func() {
		defer close(r.done)
		t := time.NewTicker(r.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				r.refresh(ctx)
			}
		}
	}()
}

// refresh renews the registration and reads the list.
func (r *Roster) refresh(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Interval)
	defer cancel()
	if r.cfg.URL != "" {
		if err := r.reg.RegisterServer(ctx, r.cfg.ID, r.cfg.URL, r.cfg.TTL, r.cfg.Now()); err != nil {
			r.log.Warn("cannot renew this server's registration", zap.Error(err))
		}
	}
	list, err := r.reg.LiveServers(ctx, r.cfg.Now())
	if err != nil {
		r.log.Warn("cannot read the live servers; answers keep the last list", zap.Error(err))
		return
	}
	r.mu.Lock()
	changed := !slices.Equal(list, r.list)
	if changed {
		r.list = list
		close(r.changed)
		r.changed = make(chan struct{})
	}
	r.mu.Unlock()
	if changed {
		r.log.Info("live servers", zap.Strings("servers", list))
	}
}

// Servers returns the URLs of the live servers, sorted (nil until known),
// and a channel closed when they change: a long-poll held by this server
// answers then, so that hosts hear of a server added or gone at once.
func (r *Roster) Servers() ([]string, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.list), r.changed
}

// Close stops the renewals and removes this server's registration, so that
// answers stop naming it before its TTL is over.
func (r *Roster) Close(ctx context.Context) error {
	if r.cancel != nil {
		r.cancel()
		<-r.done
	}
	if r.cfg.URL == "" {
		return nil
	}
	return r.reg.UnregisterServer(ctx, r.cfg.ID)
}
