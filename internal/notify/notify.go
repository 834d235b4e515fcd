// Package notify posts the events that need a person's attention (an apply
// finished or failed, a rollout failed or reverted, a host lost or back, a
// certificate not obtained, a scheduled run failed) to webhooks: the
// server's --notify targets get every project's, a project's `notify:`
// targets its own.
//
// Delivery never slows what caused the event: the loops' holder (package
// leader) follows the event log by sequence number, hands each event to a
// bounded queue and moves a cursor in the store, fenced by the loops' lease,
// so that with several servers on one store each event is handed over once,
// by one of them. Workers post from the queue, each delivery signed and
// retried with exponential back-off a bounded number of times; one that
// still fails, or finds the queue full, becomes a notify.failed event that
// names the receiver by its host only (a webhook's path and query often hold
// its token). Delivery is at most once: the deliveries queued or retrying
// when the loops move to another server are not made again.
package notify

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/store"
)

// EventFailed records a notification not delivered: its retries ran out,
// or the queue was full.
const EventFailed store.EventType = "notify.failed"

// Kinds are the event types that are notified, in one place: a feature
// whose failures need someone (backups, say) adds its type here.
var Kinds = []store.EventType{
	store.EventApplyFinished,
	store.EventRolloutFailed,
	store.EventRolloutReverted,
	store.EventHostDown,
	store.EventHostUp,
	store.EventCertificateFailed,
	store.EventRunFailed,
	store.EventRunTimedOut,
	store.EventRunLost,
	store.EventRunMissed,
	// A backup or restore that fails needs someone: a volume whose
	// backups fail for a day must never be silent.
	store.EventBackupFailed,
	store.EventRestoreFailed,
	// A failover moved a database (or could not): someone must know how
	// much data the restore may have lost, and that a stale copy waits.
	store.EventVolumeFailedOver,
	store.EventVolumeFailoverFailed,
	store.EventVolumeStaleCopy,
	store.EventHostFenced,
}

// Notified reports whether events of type t are notified.
func Notified(t store.EventType) bool { return slices.Contains(Kinds, t) }

// Config is the notifications' settings. Start from DefaultConfig.
type Config struct {
	// Targets get every project's events (the server's --notify).
	Targets []inputs.NotifyTarget
	// Secret signs the deliveries to Targets; a project's are signed with
	// ProjectKey(Secret, project).
	Secret []byte
	// QueueSize bounds the deliveries waiting for a worker, Workers is how
	// many post at once.
	QueueSize, Workers int
	// Tries bounds the attempts of one delivery; the waits between them
	// start at FirstRetry and double up to MaxRetry.
	Tries                int
	FirstRetry, MaxRetry time.Duration
	// Client posts the deliveries; its Timeout bounds each attempt.
	Client *http.Client
}

// DefaultConfig is 5 tries over about two minutes (waits of 8, 16, 32 and
// 64 s), 4 workers, 256 deliveries queued, 10 s per attempt.
func DefaultConfig() Config {
	return Config{QueueSize: 256, Workers: 4, Tries: 5, FirstRetry: 8 * time.Second, MaxRetry: time.Minute,
		Client: &http.Client{Timeout: 10 * time.Second, CheckRedirect: noRedirects}}
}

// noRedirects keeps a delivery to the URL it was given: a redirect could
// send a signed body, or the query's token, elsewhere.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Validate joins every problem of c; targets are named as the server's
// --notify flags.
func (c Config) Validate() error {
	var errs []error
	for i, t := range c.Targets {
		if err := inputs.CheckNotifyTarget(t); err != nil {
			errs = append(errs, fmt.Errorf("--notify #%d: %w", i+1, err))
		}
	}
	if len(c.Secret) < 16 {
		errs = append(errs, errors.New("notify: the signing secret must be at least 16 bytes"))
	}
	if c.QueueSize < 1 || c.Workers < 1 || c.Tries < 1 || c.FirstRetry <= 0 || c.MaxRetry < c.FirstRetry {
		errs = append(errs, errors.New("notify: queue size, workers and tries must be positive, and 0 < first retry <= max retry"))
	}
	if c.Client == nil {
		errs = append(errs, errors.New("notify: no HTTP client"))
	}
	return errors.Join(errs...)
}

// Events is the event log as the notifications follow it, and where a
// failed delivery is recorded.
type Events interface {
	ListEvents(ctx context.Context, since int64, limit int) ([]store.Event, error)
	WatchEvents() <-chan struct{}
	AppendEvent(ctx context.Context, e store.Event) (int64, error)
}

// ProjectTargets gives a project's own targets (its last apply's notify:).
type ProjectTargets interface {
	NotifyTargets(ctx context.Context, project string) ([]inputs.NotifyTarget, error)
}

// Deps are what a Service works with; every one is required.
type Deps struct {
	Events   Events
	Cursor   store.NotifyCursor
	Projects ProjectTargets
	Logger   *zap.Logger
	Now      func() time.Time
}

// Service delivers the notifications while Run runs: the server runs it
// with the background loops, on the loops' holder only.
type Service struct {
	cfg  Config
	deps Deps
	log  *zap.Logger

	following chan struct{} // closed once a Run fixed where it starts
	once      sync.Once
}

// New returns the notifications' service; nothing runs until Run.
func New(cfg Config, deps Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Events == nil || deps.Cursor == nil || deps.Projects == nil || deps.Logger == nil || deps.Now == nil {
		return nil, errors.New("notify: every dependency must be set")
	}
	return &Service{cfg: cfg, deps: deps, log: deps.Logger.With(zap.String("component", "notify")), following: make(chan struct{})}, nil
}

// Following is closed once the first Run has fixed where in the event log
// it starts: every event recorded after that is notified.
func (s *Service) Following() <-chan struct{} { return s.following }

// delivery is one event to post to one target, with the key that signs it;
// project is set for a project's own target.
type delivery struct {
	event   store.Event
	target  inputs.NotifyTarget
	key     []byte
	project string
}

// eventPage is how many events one read of the log takes.
const eventPage = 200

// cursorEvery is how often at most the cursor is stored past events that
// handed nothing over.
const cursorEvery = 10 * time.Second

// Run follows the event log from the stored cursor and delivers the
// notified events until ctx ends (the loops' lease lost, or the server
// stopping), then waits for its workers. ctx is fenced by the loops' lease:
// once another server holds them, the cursor's move is refused and Run
// returns.
func (s *Service) Run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	queue := make(chan delivery, s.cfg.QueueSize)
	var workers sync.WaitGroup
	for range s.cfg.Workers {
		workers.Go(func() { s.work(ctx, queue) })
	}
	defer workers.Wait()
	defer cancel() // before the wait: a worker retrying stops now
	since, err := s.start(ctx)
	saved, savedAt := since, time.Now()
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("notifications stopped: their cursor not read or kept", zap.Error(err))
		}
		return
	}
	for {
		changed := s.deps.Events.WatchEvents()
		evs, err := s.deps.Events.ListEvents(ctx, since, eventPage)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("events not read for notifications", zap.Error(err))
		}
		handed := false
		for _, e := range evs {
			handed = s.hand(ctx, queue, e) || handed
		}
		if len(evs) > 0 {
			since = evs[len(evs)-1].Seq
		}
		// The cursor is stored after every page that handed something over,
		// so that no event is notified twice; past the others (most events)
		// only every cursorEvery, sparing the store a write per event: a new
		// holder reads those again, and notifies none of them.
		if since != saved && (handed || time.Since(savedAt) >= cursorEvery) {
			if err := s.deps.Cursor.SetNotifyCursor(ctx, since); errors.Is(err, store.ErrFenced) {
				return
			} else if err != nil && ctx.Err() == nil {
				s.log.Warn("notifications' cursor not moved (the next move records it)", zap.Error(err))
			} else if err == nil {
				saved, savedAt = since, time.Now()
			}
		}
		if len(evs) == eventPage {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-time.After(cursorEvery): // a read that failed is retried, a cursor behind is stored
		}
	}
}

// start reads where the notifications resume and stores it, so that a
// cursor never set (a new control plane: the log's end) is fixed at once
// and the next holder resumes there too, whatever is recorded meanwhile.
func (s *Service) start(ctx context.Context) (int64, error) {
	since, err := s.deps.Cursor.NotifyCursor(ctx)
	if err != nil {
		return 0, err
	}
	if err := s.deps.Cursor.SetNotifyCursor(ctx, since); err != nil {
		return 0, err
	}
	s.once.Do(func() { close(s.following) })
	return since, nil
}

// hand queues e's deliveries, if its type is notified: to the server's
// targets and to its project's. A full queue drops the delivery, with an
// event: a receiver slow enough to fill it must not hold the log back. It
// reports whether e had any delivery.
func (s *Service) hand(ctx context.Context, queue chan<- delivery, e store.Event) bool {
	if !Notified(e.Type) {
		return false
	}
	var ds []delivery
	for _, t := range s.cfg.Targets {
		ds = append(ds, delivery{event: e, target: t, key: s.cfg.Secret})
	}
	if e.Project != "" {
		ts, err := s.deps.Projects.NotifyTargets(ctx, e.Project)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("a project's notify targets not read: its own webhooks miss this event",
				zap.String("project", e.Project), zap.Int64("seq", e.Seq), zap.Error(err))
		}
		for _, t := range ts {
			ds = append(ds, delivery{event: e, target: t, key: ProjectKey(s.cfg.Secret, e.Project), project: e.Project})
		}
	}
	for _, d := range ds {
		select {
		case queue <- d:
		default:
			s.failed(ctx, d, "dropped: the delivery queue is full (receivers too slow or failing)")
		}
	}
	return len(ds) > 0
}

// work posts the queued deliveries until ctx ends.
func (s *Service) work(ctx context.Context, queue <-chan delivery) {
	for {
		select {
		case <-ctx.Done():
			return
		case d := <-queue:
			tries, err := s.deliver(ctx, d)
			if err != nil && ctx.Err() == nil {
				s.failed(ctx, d, fmt.Sprintf("not delivered after %d tries: %v", tries, err))
			}
		}
	}
}

// failed records a delivery that failed as a notify.failed event, naming
// the receiver by its host only.
func (s *Service) failed(ctx context.Context, d delivery, why string) {
	host := hostOf(d.target.URL)
	s.log.Warn("notification not delivered", zap.String("receiver", host), zap.Int64("seq", d.event.Seq),
		zap.String("event", string(d.event.Type)), zap.String("why", why))
	// A project's own webhook's failure is the project's event: its deploy
	// tokens read it; a server target's is the operator's.
	_, err := s.deps.Events.AppendEvent(ctx, store.Event{Time: s.deps.Now(), Type: EventFailed, Project: d.project,
		Message: fmt.Sprintf("webhook to %s for event %d (%s) %s", host, d.event.Seq, d.event.Type, why)})
	if err != nil && ctx.Err() == nil {
		s.log.Warn("notify.failed event not recorded", zap.Error(err))
	}
}
