package sessionhost

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource"
)

// rescan is how often a following logs session lists the containers again,
// to follow the replicas a roll starts.
const rescan = 300 * time.Millisecond

// maxLine bounds one line as sent: a longer one is cut (Docker itself splits
// lines at 16 KiB).
const maxLine = 8 << 10

// replica is one container a logs session reads.
type replica struct {
	id, egg string
	slot    int
}

// list returns the request's containers on this host (this host's and
// Hatchery's only): see pick. An exec selects its container by the same
// fields (project, egg, slot; never a run's).
func (r *Runner) list(ctx context.Context, req contract.LogsRequest, runningOnly bool) ([]replica, error) {
	found, err := r.listOwned(ctx, req, runningOnly)
	if err != nil {
		return nil, err
	}
	return pick(found, r.cfg.HostID, req), nil
}

// listOwned lists the containers labelled as this host's of the request's
// project (and egg, and run, if it names them), as Docker has them.
func (r *Runner) listOwned(ctx context.Context, req contract.LogsRequest, runningOnly bool) ([]container.Summary, error) {
	ns, name, err := resource.SplitProject(req.Project)
	if err != nil {
		return nil, err
	}
	f := filters.NewArgs(
		filters.Arg("label", containers.LabelManaged+"=true"),
		filters.Arg("label", containers.LabelHost+"="+r.cfg.HostID),
		filters.Arg("label", containers.LabelNamespace+"="+ns),
		filters.Arg("label", containers.LabelProject+"="+name))
	if req.Egg != "" {
		f.Add("label", containers.LabelEgg+"="+req.Egg)
	}
	if req.Run != "" {
		f.Add("label", containers.LabelRun+"="+req.Run)
	}
	if runningOnly {
		f.Add("status", "running")
	}
	return r.cfg.Docker.ContainerList(ctx, container.ListOptions{All: !runningOnly, Filters: f})
}

// pick keeps, of the containers Docker listed, those the request reads:
// this host's and Hatchery's only, never the agent's relays (eggs named
// "<egg>.relay-..."), which are not the project's output. A request for a
// run reads that run's container once it started (one only created would
// end its logs at once); any other reads the egg's replicas of its slot
// and leaves runs' containers out, whose output is no replica's.
func pick(found []container.Summary, hostID string, req contract.LogsRequest) []replica {
	var out []replica
	for _, c := range found {
		if !containers.Owned(c.Labels, hostID) || strings.Contains(c.Labels[containers.LabelEgg], ".relay-") ||
			c.Labels[containers.LabelRun] != req.Run || (req.Egg != "" && c.Labels[containers.LabelEgg] != req.Egg) {
			continue
		}
		s, err := strconv.Atoi(c.Labels[containers.LabelSlot])
		if req.Run != "" {
			if c.State == container.StateCreated {
				continue
			}
			s = max(s, 0) // a run has one container, whatever slot it says
		} else if err != nil || (req.Slot >= 0 && s != req.Slot) {
			continue
		}
		out = append(out, replica{id: c.ID, egg: c.Labels[containers.LabelEgg], slot: s})
	}
	return out
}

// logs streams the request's containers' lines as contract.LogRecord
// messages; each container's lines come from one goroutine, so in order.
// Following, it lists the containers again every rescan and reads a new
// one from its first line, saying it started; a container whose output ends
// is said to have stopped. Without follow it ends when every reader did.
func (r *Runner) logs(ctx context.Context, conn *websocket.Conn, req contract.LogsRequest) error {
	ctx = conn.CloseRead(ctx) // the operator sends nothing; its close ends the session
	if req.Run != "" && req.Follow {
		return r.followRun(ctx, conn, req)
	}
	// Following, only running containers are read: the logs of one still
	// being made (created, not started) would end at once, and it would
	// never be read again. It is found running by a later scan.
	first, err := r.list(ctx, req, req.Follow)
	if err != nil {
		return refuse(CodeFailed, "list containers: %v", err)
	}
	var wg sync.WaitGroup
	seen := map[string]bool{}
	start := func(c replica, opts container.LogsOptions, announce bool) {
		seen[c.id] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			if announce {
				r.send(ctx, conn, contract.LogRecord{Time: time.Now(), Host: r.cfg.HostID, Egg: c.egg, Slot: c.slot, Container: c.id, Event: "started"})
			}
			r.follow(ctx, conn, c, opts)
			if req.Follow && ctx.Err() == nil {
				r.send(ctx, conn, contract.LogRecord{Time: time.Now(), Host: r.cfg.HostID, Egg: c.egg, Slot: c.slot, Container: c.id, Event: "stopped"})
			}
		}()
	}
	opts := logsOptions(req)
	for _, c := range first {
		start(c, opts, false)
	}
	if !req.Follow {
		wg.Wait()
		return nil
	}
	// A replica started from now on is read whole: every line of it once.
	fresh := container.LogsOptions{ShowStdout: true, ShowStderr: true, Timestamps: true, Follow: true, Tail: "all"}
	tick := time.NewTicker(rescan)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		case <-tick.C:
		}
		now, err := r.list(ctx, req, true)
		if err != nil {
			continue // the next scan tries again
		}
		for _, c := range now {
			if !seen[c.id] {
				start(c, fresh, true)
			}
		}
	}
}

// logsOptions are Docker's options for the request's first read of a
// container: its tail, since and follow.
func logsOptions(req contract.LogsRequest) container.LogsOptions {
	opts := container.LogsOptions{ShowStdout: true, ShowStderr: true, Timestamps: true, Follow: req.Follow, Tail: "all"}
	if req.Tail >= 0 {
		opts.Tail = strconv.Itoa(req.Tail)
	}
	if !req.Since.IsZero() {
		opts.Since = strconv.FormatFloat(float64(req.Since.UnixNano())/1e9, 'f', 9, 64)
	}
	return opts
}

// followRun follows one run's container: it waits for the container to
// start (its image may still be pulled or built), scanning every rescan,
// reads its output as it comes until the container ends, and then ends the
// session, which is how `hatch run` learns its output is complete.
func (r *Runner) followRun(ctx context.Context, conn *websocket.Conn, req contract.LogsRequest) error {
	tick := time.NewTicker(rescan)
	defer tick.Stop()
	for {
		found, err := r.list(ctx, req, false)
		if err == nil && len(found) > 0 {
			r.follow(ctx, conn, found[0], logsOptions(req))
			return ctx.Err()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// follow reads one container's output until it ends or ctx does.
func (r *Runner) follow(ctx context.Context, conn *websocket.Conn, c replica, opts container.LogsOptions) {
	rc, err := r.cfg.Docker.ContainerLogs(ctx, c.id, opts)
	if err != nil {
		return // removed meanwhile: nothing to read
	}
	defer rc.Close()
	stop := context.AfterFunc(ctx, func() { rc.Close() })
	defer stop()
	base := contract.LogRecord{Host: r.cfg.HostID, Egg: c.egg, Slot: c.slot, Container: c.id}
	out := &lineWriter{emit: func(rec contract.LogRecord) { r.send(ctx, conn, rec) }, base: base, stream: "stdout"}
	errOut := &lineWriter{emit: out.emit, base: base, stream: "stderr"}
	_, _ = stdcopy.StdCopy(out, errOut, rc)
	out.flush()
	errOut.flush()
}

// send writes one record; a failed write ends the session through ctx
// (the operator's stream is gone).
func (r *Runner) send(ctx context.Context, conn *websocket.Conn, rec contract.LogRecord) {
	data, err := json.Marshal(rec)
	if err != nil {
		return
	}
	_ = conn.Write(ctx, websocket.MessageText, data)
}

// lineWriter cuts Docker's timestamped output into records, one per line.
type lineWriter struct {
	emit   func(contract.LogRecord)
	base   contract.LogRecord
	stream string
	buf    []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.line(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > maxLine { // a line without its end yet, too long to keep
		w.line(w.buf)
		w.buf = w.buf[:0]
	}
	return len(p), nil
}

func (w *lineWriter) flush() {
	if len(w.buf) > 0 {
		w.line(w.buf)
		w.buf = nil
	}
}

// line parses "<RFC 3339 nano timestamp> <text>" into a record.
func (w *lineWriter) line(b []byte) {
	rec := w.base
	rec.Stream = w.stream
	ts, text, ok := bytes.Cut(b, []byte{' '})
	if t, err := time.Parse(time.RFC3339Nano, string(ts)); ok && err == nil {
		rec.Time, b = t, text
	} else {
		rec.Time = time.Now()
	}
	if len(b) > maxLine {
		b = b[:maxLine]
	}
	rec.Line = strings.ToValidUTF8(string(b), "\uFFFD")
	w.emit(rec)
}
