package sessionbroker

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/time/rate"

	"github.com/hatchery/hatchery/internal/contract"
)

// A `hatch logs` request reads many hosts at once, each through a session of
// its own, and is one session to its admin's limit: a fleet of more hosts
// than the limit is still read whole. Only the project's hosts are asked
// (those whose desired state places one of its eggs), each host's records
// are held to the eggs placed on it, and their Host is the session's: a host
// cannot write into another's lines, nor show an egg it does not run. Each
// host's stream is relayed as soon as it comes, so one that never comes
// delays nobody; following, a host placed on later (a roll onto a new
// host) joins as its desired state changes.

// LogSource says which hosts a logs request reads: the control plane's
// fleet, seen from the server.
type LogSource interface {
	// Targets returns the hosts to read now, by ID, each with the eggs
	// whose records it may send.
	Targets(ctx context.Context) (map[string][]string, error)
	// Changed returns a channel closed when the targets may have changed
	// after the call, or ctx ends: a follow calls it before Targets, so no
	// change slips between.
	Changed(ctx context.Context) <-chan struct{}
}

// rejoinGap spaces a follow's reads of its targets: a host placed on joins
// within about this long of the change.
const rejoinGap = 500 * time.Millisecond

// EventUnavailable is the Event of a record the server writes itself into
// a logs stream: a host could not be read (its Line says why).
const EventUnavailable = "unavailable"

// Logs is one `hatch logs` request, from OpenLogs to Close.
type Logs struct {
	b     *Broker
	actor string
	once  sync.Once
}

// OpenLogs takes one of actor's sessions for a logs request, however many
// hosts it then reads (ErrLimit when actor has none left). Whoever opens it
// must Close it.
func (b *Broker) OpenLogs(actor string) (*Logs, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.perActor[actor] >= b.cfg.PerActor {
		return nil, fmt.Errorf("admin token %q has %d sessions open already (the limit): %w", actor, b.perActor[actor], ErrLimit)
	}
	b.perActor[actor]++
	return &Logs{b: b, actor: actor}, nil
}

// Close gives the actor's session back. Idempotent; the hosts' sessions end
// with Serve.
func (l *Logs) Close() {
	l.once.Do(func() {
		l.b.mu.Lock()
		defer l.b.mu.Unlock()
		l.b.release(l.actor)
	})
}

// Serve reads req's logs from the targets (host ID to the eggs it may send)
// and, following, from the hosts the source adds, into the operator's
// stream, each record whole: without follow until every host's stream
// ended (then the operator's is closed normally), following until the
// operator goes away or ctx ends (then every host's stream is closed), or,
// for a run, until its host's stream ended with the run's output. A
// host that cannot be read is said in a record of Event EventUnavailable.
// Each host's stream is held to BytesPerSecond.
func (l *Logs) Serve(ctx context.Context, operator *websocket.Conn, req contract.LogsRequest, targets map[string][]string, src LogSource) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The operator sends nothing on a logs stream: reading only notices
	// its close, which ends the fan-in.
	opCtx := operator.CloseRead(ctx)
	f := &logFan{b: l.b, actor: l.actor, req: req, operator: operator, base: ctx, eggs: map[string]map[string]bool{}}
	start := time.Now()
	f.join(opCtx, targets, req)
	if req.Follow {
		// A host that joins later has only new replicas of the project:
		// its lines from the start of the request on, each once. A run's
		// host is read whole whenever it joins: the run is its one container.
		late := req
		if req.Run == "" {
			late.Tail = -1
			if late.Since.Before(start) {
				late.Since = start
			}
		}
		said := "" // the last failure told, said once however often it recurs
		// A run is on one host: once that host joined, its stream, which
		// ends with the run's output, is the whole session.
		for req.Run == "" || !f.joined() {
			changed := src.Changed(opCtx)
			read := time.Now()
			if t, err := src.Targets(opCtx); err == nil {
				f.join(opCtx, t, late)
				said = ""
			} else if opCtx.Err() == nil && err.Error() != said {
				said = err.Error()
				f.unavailable(opCtx, "", fmt.Sprintf("the project's hosts could not be read (tried again at the next change): %v", err))
			}
			if req.Run != "" && f.joined() {
				break
			}
			select {
			case <-changed:
			case <-opCtx.Done():
			}
			// A burst of changes (a busy event log) costs one read per gap.
			select {
			case <-time.After(rejoinGap - time.Since(read)):
			case <-opCtx.Done():
			}
			if opCtx.Err() != nil {
				break
			}
		}
	}
	f.wg.Wait()
	if opCtx.Err() == nil {
		_ = operator.Close(websocket.StatusNormalClosure, "")
	}
	operator.CloseNow()
}

// logFan is a logs request's hosts and what each may send.
type logFan struct {
	b        *Broker
	actor    string
	req      contract.LogsRequest
	operator *websocket.Conn
	base     context.Context // the request's, which ends with the server: the hosts' streams are read under it
	wg       sync.WaitGroup  // the hosts' relays

	mu   sync.Mutex                 // guards eggs
	eggs map[string]map[string]bool // host ID -> eggs its records may name; a host is in it once joined
}

// join starts reading every target not read yet, with req, and lets each
// one read already send the eggs placed on it since: those placed on a host
// at any time during the request (a replica moved away still says it
// stopped).
func (f *logFan) join(ctx context.Context, targets map[string][]string, req contract.LogsRequest) {
	for _, host := range slices.Sorted(maps.Keys(targets)) {
		f.mu.Lock()
		allowed, known := f.eggs[host]
		if !known {
			allowed = map[string]bool{}
			f.eggs[host] = allowed
		}
		for _, egg := range targets[host] {
			allowed[egg] = true
		}
		f.mu.Unlock()
		if !known {
			f.wg.Go(func() { f.relay(ctx, host, req) })
		}
	}
}

// joined reports whether a host is read (or was).
func (f *logFan) joined() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.eggs) > 0
}

// relay offers req to host, waits for its stream (alone: the others do not
// wait for it) and passes its records on, checked, until it ends or ctx
// does. A host whose stream ended is not asked again.
func (f *logFan) relay(ctx context.Context, host string, req contract.LogsRequest) {
	sess, err := f.b.open(host, f.actor, contract.SessionOffer{Kind: contract.SessionLogs, Logs: &req}, false)
	if err != nil {
		f.unavailable(ctx, host, err.Error())
		return
	}
	defer sess.Close()
	agent, err := sess.Wait(ctx.Done())
	if err != nil {
		if ctx.Err() == nil {
			f.unavailable(ctx, host, err.Error())
		}
		return
	}
	agent.SetReadLimit(MaxMessage)
	// The operator going is told to the agent with a close and its reason.
	// A read under ctx would drop the connection without one: the stream
	// is read under the server's context (base), and closed from here.
	stop := context.AfterFunc(ctx, func() { _ = agent.Close(websocket.StatusGoingAway, "the operator went away") })
	defer stop()
	lim := rate.NewLimiter(rate.Limit(f.b.cfg.BytesPerSecond), max(f.b.cfg.BytesPerSecond, MaxMessage))
	for {
		typ, data, err := agent.Read(f.base)
		if err != nil {
			agent.CloseNow()
			return
		}
		out, ok := f.check(host, typ, data)
		if !ok {
			continue
		}
		if lim.WaitN(ctx, len(data)) != nil || f.operator.Write(ctx, websocket.MessageText, out) != nil {
			agent.CloseNow()
			return
		}
	}
}

// check passes on a host's message only if it is a record of an egg placed
// on that host and of the request's egg and slot, with the host's ID as its
// Host whatever it said.
func (f *logFan) check(host string, typ websocket.MessageType, data []byte) ([]byte, bool) {
	if typ != websocket.MessageText {
		return nil, false
	}
	var rec contract.LogRecord
	if json.Unmarshal(data, &rec) != nil {
		return nil, false
	}
	f.mu.Lock()
	allowed := f.eggs[host][rec.Egg]
	f.mu.Unlock()
	if !allowed || (f.req.Egg != "" && rec.Egg != f.req.Egg) || (f.req.Slot >= 0 && rec.Slot != f.req.Slot) {
		return nil, false
	}
	rec.Host = host
	out, err := json.Marshal(rec)
	return out, err == nil
}

// unavailable tells the operator, in the stream, that host (or, "", the
// request) could not be read: the other hosts' records still come.
func (f *logFan) unavailable(ctx context.Context, host, why string) {
	msg, err := json.Marshal(contract.LogRecord{Time: time.Now(), Host: host, Event: EventUnavailable, Line: why})
	if err == nil {
		_ = f.operator.Write(ctx, websocket.MessageText, msg)
	}
}
