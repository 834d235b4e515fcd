// Package sessionbroker pairs an operator's stream (hatch logs, hatch exec) with
// the stream a host's agent opens for it, in the control plane. The control
// plane never connects to a host: it offers each session to its host on a
// long-poll of its own (Offers), the agent opens a WebSocket naming the
// session (Attach), and the server relays messages between the two (Relay;
// a logs request's many hosts: Logs) under the limits of Config.
//
// A session is bound to the host it was offered to and to an unguessable ID
// (32 random bytes): a stream from any other host is refused, since it would
// read the operator's input. Sessions live in this server's memory only, so a
// server restart ends them (both sides see their stream close) and an agent
// restart never replays one. Several servers (issue 17) would add a second
// step: an agent whose stream reaches server B for a session made on A gets
// it relayed to A (the offer would name its server); the Broker's Attach is
// the one place that changes.
package sessionbroker

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/hatchery/hatchery/internal/contract"
)

// Config holds the limits of sessions.
type Config struct {
	// PerHost is how many sessions one host serves at once.
	PerHost int
	// PerActor is how many sessions one admin token has open at once (a
	// `hatch logs` counts once, however many hosts it reads).
	PerActor int
	// IdleTimeout ends a session no byte crossed, either way, for this long.
	IdleTimeout time.Duration
	// BytesPerSecond bounds each direction of each session.
	BytesPerSecond int
	// PairTimeout is how long the operator waits for the agent's stream.
	PairTimeout time.Duration
}

// DefaultConfig returns the limits `hatch server` uses.
func DefaultConfig() Config {
	return Config{PerHost: 16, PerActor: 16, IdleTimeout: 30 * time.Minute, BytesPerSecond: 4 << 20, PairTimeout: 15 * time.Second}
}

// Validate names every setting out of range.
func (c Config) Validate() error {
	var errs []error
	if c.PerHost < 1 || c.PerActor < 1 {
		errs = append(errs, fmt.Errorf("sessions: per-host (%d) and per-admin (%d) limits must be at least 1", c.PerHost, c.PerActor))
	}
	if c.IdleTimeout <= 0 || c.PairTimeout <= 0 {
		errs = append(errs, errors.New("sessions: the idle and pairing timeouts must be positive"))
	}
	if c.BytesPerSecond < 1024 {
		errs = append(errs, fmt.Errorf("sessions: bytes per second %d is below 1024", c.BytesPerSecond))
	}
	return errors.Join(errs...)
}

// ErrLimit is returned by Open when the host or the admin has as many
// sessions open as the limits allow.
var ErrLimit = errors.New("too many sessions")

// ErrUnknown is returned by Attach for a session that does not exist, was
// attached already, or was offered to another host: the three look alike to
// the caller, so a stream from another host learns nothing.
var ErrUnknown = errors.New("no such session for this host")

// Broker keeps the sessions waiting for, or served by, an agent's stream.
// Safe for concurrent use.
type Broker struct {
	cfg Config

	mu       sync.Mutex          // guards the fields below
	byID     map[string]*Session // open sessions
	queued   map[string][]string // per host: IDs not yet handed to its agent
	wake     map[string]chan struct{}
	perHost  map[string]int
	perActor map[string]int
}

// New returns a broker with the limits of cfg.
func New(cfg Config) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Broker{cfg: cfg, byID: map[string]*Session{}, queued: map[string][]string{}, wake: map[string]chan struct{}{},
		perHost: map[string]int{}, perActor: map[string]int{}}, nil
}

// Config returns the broker's limits.
func (b *Broker) Config() Config { return b.cfg }

// Session is one session, from Open to Close.
type Session struct {
	b     *Broker
	Host  string
	Actor string
	Offer contract.SessionOffer

	ofActor  bool            // counts against Actor's limit (not a logs request's host session)
	attached chan attachment // one slot: the agent's stream
	taken    bool            // an agent's stream was attached; guarded by Broker.mu
	done     chan struct{}   // closed by Close: the agent's handler returns
	once     sync.Once
}

type attachment struct {
	conn *websocket.Conn
}

// Open makes a session for host on behalf of actor and offers it to the
// host's agent. Whoever opens it must Close it.
func (b *Broker) Open(host, actor string, offer contract.SessionOffer) (*Session, error) {
	return b.open(host, actor, offer, true)
}

// open is Open; a session that is part of a logs request (counted once,
// by OpenLogs) does not count against its actor's limit again (ofActor).
func (b *Broker) open(host, actor string, offer contract.SessionOffer, ofActor bool) (*Session, error) {
	id, err := newID()
	if err != nil {
		return nil, err
	}
	offer.ID, offer.Actor = id, actor
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.perHost[host] >= b.cfg.PerHost {
		return nil, fmt.Errorf("host %s serves %d sessions already (the limit): %w", host, b.perHost[host], ErrLimit)
	}
	if ofActor && b.perActor[actor] >= b.cfg.PerActor {
		return nil, fmt.Errorf("admin token %q has %d sessions open already (the limit): %w", actor, b.perActor[actor], ErrLimit)
	}
	s := &Session{b: b, Host: host, Actor: actor, Offer: offer, ofActor: ofActor, attached: make(chan attachment, 1), done: make(chan struct{})}
	b.byID[id] = s
	b.perHost[host]++
	if ofActor {
		b.perActor[actor]++
	}
	b.queued[host] = append(b.queued[host], id)
	if ch, ok := b.wake[host]; ok {
		close(ch)
		delete(b.wake, host)
	}
	return s, nil
}

// Offers returns the sessions not yet handed to host's agent (each is
// handed once), and a channel closed when another is offered: call it
// again then.
func (b *Broker) Offers(host string) ([]contract.SessionOffer, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []contract.SessionOffer
	for _, id := range b.queued[host] {
		if s, ok := b.byID[id]; ok {
			out = append(out, s.Offer)
		}
	}
	delete(b.queued, host)
	ch, ok := b.wake[host]
	if !ok {
		ch = make(chan struct{})
		b.wake[host] = ch
	}
	return out, ch
}

// Claim takes session id for the agent stream of host that asks for it:
// only the host the session was offered to may, once. It is called before
// the stream's upgrade is accepted, so a stream from another host, or a
// second one, is refused with a plain HTTP answer (ErrUnknown).
func (b *Broker) Claim(host, id string) (*Session, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.byID[id]
	if !ok || s.Host != host || s.taken {
		return nil, ErrUnknown
	}
	s.taken = true
	return s, nil
}

// Attach hands the claimed session's agent stream to the operator's side,
// and returns a channel closed when the session ends: the agent's handler
// keeps the stream until then.
func (s *Session) Attach(conn *websocket.Conn) <-chan struct{} {
	s.attached <- attachment{conn: conn} // never blocks: one slot, claimed once
	return s.done
}

// Wait returns the agent's stream once it is attached, or an error when it
// is not within the pairing timeout or done closes first.
func (s *Session) Wait(done <-chan struct{}) (*websocket.Conn, error) {
	t := time.NewTimer(s.b.cfg.PairTimeout)
	defer t.Stop()
	select {
	case a := <-s.attached:
		return a.conn, nil
	case <-t.C:
		return nil, fmt.Errorf("host %s did not open the session's stream within %v: is its agent running and connected?",
			s.Host, s.b.cfg.PairTimeout)
	case <-done:
		return nil, errors.New("the session was cancelled before its host's stream came")
	}
}

// Close ends the session: it is forgotten, its limits released, and the
// agent's handler returns. Idempotent.
func (s *Session) Close() {
	s.once.Do(func() {
		b := s.b
		b.mu.Lock()
		delete(b.byID, s.Offer.ID)
		b.perHost[s.Host]--
		if b.perHost[s.Host] <= 0 {
			delete(b.perHost, s.Host)
		}
		if s.ofActor {
			b.release(s.Actor)
		}
		b.mu.Unlock()
		close(s.done)
	})
}

// release gives back one of actor's sessions; b.mu is held.
func (b *Broker) release(actor string) {
	b.perActor[actor]--
	if b.perActor[actor] <= 0 {
		delete(b.perActor, actor)
	}
}

// Count returns how many sessions are open.
func (b *Broker) Count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.byID)
}

func newID() (string, error) {
	var buf [32]byte
	if _, err := rand.Read(buf[:]); err != nil {
		return "", fmt.Errorf("session ID: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(buf[:]), nil
}
