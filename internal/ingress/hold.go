package ingress

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// A stateful egg (Egg.Stateful: one replica with a volume, rolled and
// restarted stop-first) has a gap on every roll and restart: its old
// container is drained and stopped before the new one starts, so for a
// moment (half a second measured) no backend can take a request. Answering
// 503 there fails requests a client never expected to fail; instead the
// ingress holds them. When the egg's last backend here leaves the pool (a
// drain, a death, a failed health check), a hold window opens: requests
// and connections that find no backend wait in it, and are sent to the new
// backend as soon as it joins the pool, or get 503 (a TCP connection is
// closed) once Config.HoldTimeout has passed since the window opened. A
// window opens only when a backend that was in the pool leaves it, so an
// egg whose replica never gets healthy (a crash loop) holds once, not on
// every request.

// holdWindow is one gap of a stateful egg: from its last backend leaving
// the pool until a backend joins it again, or the bound passes.
type holdWindow struct {
	opened time.Time
	done   chan struct{} // closed when the window ends
	once   sync.Once
	// expired is set, before done is closed, when the window ended because
	// the bound passed rather than because a backend joined.
	expired atomic.Bool
	timer   *time.Timer
}

// end closes the window; expired says the bound passed. Only the first call
// counts.
func (w *holdWindow) end(expired bool) bool {
	first := false
	w.once.Do(func() {
		first = true
		w.expired.Store(expired)
		close(w.done)
	})
	return first
}

func (w *holdWindow) ended() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// holdExpiredError answers a request held for a whole window with no
// backend coming back. It is a "no backend" error, so a peer's ingress
// marks its answer as such.
type holdExpiredError struct {
	egg  string
	held time.Duration
}

func (e *holdExpiredError) Error() string {
	return fmt.Sprintf("egg %q was held %s while its replica was replaced or restarted, and no replica came back", e.egg, e.held.Round(time.Millisecond))
}

func (e *holdExpiredError) Unwrap() error { return errNoBackend }

// openHold opens a hold window if the egg holds and none is open. The
// caller holds Ingress.mu and calls it before publishing the empty pool, so
// that a request that finds the pool empty also finds the window.
func (e *egg) openHold() {
	if e.holdFor <= 0 {
		return
	}
	if w := e.window.Load(); w != nil && !w.ended() {
		return
	}
	w := &holdWindow{opened: time.Now(), done: make(chan struct{})}
	log := e.log
	w.timer = time.AfterFunc(e.holdFor, func() {
		if w.end(true) {
			log.Warn("hold ended with no backend back; held requests get 503",
				zap.Duration("held", time.Since(w.opened)), zap.Int64("waiting", e.waiting.Load()))
		}
	})
	e.window.Store(w)
	log.Info("last backend left the pool; holding new requests until one joins", zap.Duration("for", e.holdFor))
}

// closeHold ends the open window, if any, releasing what it holds: to the
// pool if a backend joined, else to a 503. The caller holds Ingress.mu and
// calls it after publishing the pool.
func (e *egg) closeHold(backendJoined bool) {
	w := e.window.Load()
	if w == nil {
		return
	}
	e.window.Store(nil)
	w.timer.Stop()
	if w.end(!backendJoined) && backendJoined {
		e.log.Info("backend joined; held requests released",
			zap.Duration("held", time.Since(w.opened)), zap.Int64("waiting", e.waiting.Load()))
	}
}

// holding reports whether a hold window is open.
func (e *egg) holding() bool {
	w := e.window.Load()
	return w != nil && !w.ended()
}

// await is acquire for a request or connection that found no backend: while
// a hold window is open it waits for the window to end, then reserves a
// backend as acquire does. It returns errNoBackend at once when no window
// is open, a *holdExpiredError when the window ended with no backend, and
// ctx's error when the caller gave up first. It starts no goroutine: a
// waiter is the caller's own, and leaves by one of those three ways.
func (e *egg) await(ctx context.Context, exclude *backend, now func() int64, localOnly bool) (*backend, error) {
	for {
		w := e.window.Load()
		if w == nil || w.ended() {
			// A window that ended since the caller's acquire may have let
			// a backend in.
			if b := e.acquire(exclude, now, localOnly); b != nil {
				return b, nil
			}
			return nil, errNoBackend
		}
		e.waiting.Add(1)
		select {
		case <-w.done:
			e.waiting.Add(-1)
		case <-ctx.Done():
			e.waiting.Add(-1)
			return nil, fmt.Errorf("held for egg %q: %w", e.name, ctx.Err())
		}
		if b := e.acquire(exclude, now, localOnly); b != nil {
			return b, nil
		}
		if w.expired.Load() {
			return nil, &holdExpiredError{egg: e.name, held: time.Since(w.opened)}
		}
		// The backend that ended the window is gone again already, or
		// another window opened: look again.
	}
}
