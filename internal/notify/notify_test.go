package notify

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/sqlite"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

// received is one delivery as a receiver saw it.
type received struct {
	header http.Header
	body   []byte
}

// receiver is a webhook on loopback that answers with status (200 by
// default) and records what it receives.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex // guards got and status
	got    []received
	status int
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{status: http.StatusOK}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, received{header: req.Header.Clone(), body: body})
		status := r.status
		r.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) received() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// projects are the projects' own targets, as the deploy service's apply
// records give them.
type projects map[string][]inputs.NotifyTarget

func (p projects) NotifyTargets(_ context.Context, project string) ([]inputs.NotifyTarget, error) {
	return p[project], nil
}

func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "hatch.db"), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// fastConfig retries at once, a few times.
func fastConfig(targets ...inputs.NotifyTarget) Config {
	cfg := DefaultConfig()
	cfg.Targets, cfg.Secret = targets, secret
	cfg.Tries, cfg.FirstRetry, cfg.MaxRetry = 3, 5*time.Millisecond, 10*time.Millisecond
	cfg.Client.Timeout = 2 * time.Second
	return cfg
}

// run runs a service until the test ends.
func run(t *testing.T, cfg Config, st *sqlite.Store, p projects, log *zap.Logger) {
	t.Helper()
	s, err := New(cfg, Deps{Events: st, Cursor: st, Projects: p, Logger: log, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-s.Following()
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func appendEvent(t *testing.T, st *sqlite.Store, e store.Event) int64 {
	t.Helper()
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	seq, err := st.AppendEvent(t.Context(), e)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

func eventsOf(t *testing.T, st *sqlite.Store, typ store.EventType) []store.Event {
	t.Helper()
	evs, err := st.ListEvents(t.Context(), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Event
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func TestTheNotifiedEventsReachTheServersAndTheirProjectsTargetsSigned(t *testing.T) {
	st := openStore(t)
	cluster, shop, other := newReceiver(t), newReceiver(t), newReceiver(t)
	appendEvent(t, st, store.Event{Type: store.EventApplyFinished, Project: "default/shop", Message: "before the notifications began"})
	run(t, fastConfig(inputs.NotifyTarget{URL: cluster.URL + "/all"}), st, projects{
		"default/shop":  {{URL: shop.URL + "/shop?token=t"}},
		"default/other": {{URL: other.URL}},
	}, zap.NewNop())

	appendEvent(t, st, store.Event{Type: store.EventResourceCreated, Project: "default/shop", Resource: "egg/web"}) // not notified
	finished := appendEvent(t, st, store.Event{Type: store.EventApplyFinished, Project: "default/shop", Message: "apply 1 succeeded", Actor: "admin"})
	down := appendEvent(t, st, store.Event{Type: store.EventHostDown, Host: "h1", Message: "no report for 30s"})

	eventually(t, "two deliveries to the cluster's target, one to the project's", func() bool {
		return len(cluster.received()) == 2 && len(shop.received()) == 1
	})
	time.Sleep(50 * time.Millisecond) // nothing more comes
	if n := len(other.received()); n != 0 {
		t.Fatalf("another project's target got %d deliveries", n)
	}
	if got := cluster.received(); len(got) != 2 {
		t.Fatalf("the cluster's target got %d deliveries, want 2 (the event before the start is not notified)", len(got))
	}
	bySeq := map[int64]received{}
	for _, r := range cluster.received() {
		if err := Verify(secret, r.header.Get(HeaderTimestamp), r.header.Get(HeaderSignature), r.body, time.Now(), time.Minute); err != nil {
			t.Fatalf("the cluster's delivery does not verify with the server's secret: %v", err)
		}
		var e api.Event
		if err := json.Unmarshal(r.body, &e); err != nil {
			t.Fatal(err)
		}
		if r.header.Get(HeaderEvent) != e.Type || r.header.Get(HeaderDelivery) == "" || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("headers %v for event %+v", r.header, e)
		}
		bySeq[e.Seq] = r
	}
	var e api.Event
	_ = json.Unmarshal(bySeq[finished].body, &e)
	if e.Type != "apply.finished" || e.Project != "default/shop" || e.Message != "apply 1 succeeded" || e.Actor != "admin" {
		t.Fatalf("the apply's delivery: %+v", e)
	}
	_ = json.Unmarshal(bySeq[down].body, &e)
	if e.Type != "host.down" || e.Host != "h1" {
		t.Fatalf("the host's delivery: %+v", e)
	}

	// The project's own target verifies with its project's key only.
	r := shop.received()[0]
	ts, sig := r.header.Get(HeaderTimestamp), r.header.Get(HeaderSignature)
	if err := Verify(ProjectKey(secret, "default/shop"), ts, sig, r.body, time.Now(), time.Minute); err != nil {
		t.Fatalf("the project's delivery does not verify with its key: %v", err)
	}
	for name, key := range map[string][]byte{"the server's": secret, "another project's": ProjectKey(secret, "default/other")} {
		if Verify(key, ts, sig, r.body, time.Now(), time.Minute) == nil {
			t.Fatalf("the project's delivery verifies with %s key", name)
		}
	}
}

func TestAFailingReceiverIsRetriedThenRecordedWithoutItsPathOrQuery(t *testing.T) {
	st := openStore(t)
	failing := newReceiver(t)
	failing.status = http.StatusServiceUnavailable
	core, logs := observer.New(zap.DebugLevel)
	run(t, fastConfig(), st, projects{"default/shop": {{URL: failing.URL + "/hooks/s3cret-path?token=s3cret-query"}}}, zap.New(core))

	seq := appendEvent(t, st, store.Event{Type: store.EventRolloutFailed, Project: "default/shop", Resource: "egg/web"})
	eventually(t, "a notify.failed event", func() bool { return len(eventsOf(t, st, EventFailed)) == 1 })
	if n := len(failing.received()); n != 3 {
		t.Fatalf("%d attempts, want the 3 tries", n)
	}
	e := eventsOf(t, st, EventFailed)[0]
	host := strings.TrimPrefix(failing.URL, "http://")
	for _, want := range []string{host, "rollout.failed", "3 tries", "503"} {
		if !strings.Contains(e.Message, want) {
			t.Errorf("notify.failed %q does not say %q", e.Message, want)
		}
	}
	if e.Project != "default/shop" {
		t.Errorf("notify.failed of a project's target is in project %q, want default/shop (its deploy tokens read it)", e.Project)
	}
	if !strings.Contains(e.Message, "event "+itoa(seq)) {
		t.Errorf("notify.failed %q does not name the event %d", e.Message, seq)
	}
	for _, entry := range logs.All() {
		line := entry.Message
		for k, v := range entry.ContextMap() {
			line += " " + k + "=" + toString(v)
		}
		if strings.Contains(line, "s3cret") {
			t.Fatalf("a log line holds the URL's path or query: %s", line)
		}
	}
	if strings.Contains(e.Message, "s3cret") {
		t.Fatalf("the event holds the URL's path or query: %s", e.Message)
	}
}

func TestARefusalIsNotRetried(t *testing.T) {
	st := openStore(t)
	refusing := newReceiver(t)
	refusing.status = http.StatusGone
	run(t, fastConfig(inputs.NotifyTarget{URL: refusing.URL}), st, nil, zap.NewNop())
	appendEvent(t, st, store.Event{Type: store.EventCertificateFailed, Resource: "route/shop.example.com"})
	eventually(t, "a notify.failed event", func() bool { return len(eventsOf(t, st, EventFailed)) == 1 })
	if n := len(refusing.received()); n != 1 {
		t.Fatalf("%d attempts at a receiver answering 410, want 1", n)
	}
	if e := eventsOf(t, st, EventFailed)[0]; e.Project != "" || !strings.Contains(e.Message, "410") {
		t.Fatalf("notify.failed of the server's target: %+v", e)
	}
}

func TestAFullQueueDropsWithAnEventAndNeverHoldsTheLogBack(t *testing.T) {
	st := openStore(t)
	release := make(chan struct{})
	var mu sync.Mutex
	got := 0
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got++
		mu.Unlock()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hanging.Close()
	defer close(release)
	cfg := fastConfig(inputs.NotifyTarget{URL: hanging.URL + "/?token=x"})
	cfg.Workers, cfg.QueueSize = 1, 1
	run(t, cfg, st, nil, zap.NewNop())
	var last int64
	for range 4 {
		last = appendEvent(t, st, store.Event{Type: store.EventHostUp, Host: "h1"})
	}
	// One is posted (and hangs), one waits in the queue, two are dropped.
	eventually(t, "two drops", func() bool { return len(eventsOf(t, st, EventFailed)) == 2 })
	for _, e := range eventsOf(t, st, EventFailed) {
		if !strings.Contains(e.Message, "queue is full") || strings.Contains(e.Message, "token") {
			t.Fatalf("a drop's event: %q", e.Message)
		}
	}
	// The cursor moves past the four though the receiver still hangs.
	eventually(t, "the cursor past the four", func() bool {
		c, err := st.NotifyCursor(t.Context())
		return err == nil && c >= last
	})
	mu.Lock()
	defer mu.Unlock()
	if got != 1 {
		t.Fatalf("%d posts, want 1 (the one that hangs)", got)
	}
}

func TestANewHolderResumesAfterTheCursorAndNotifiesEachEventOnce(t *testing.T) {
	st := openStore(t)
	r := newReceiver(t)
	cfg := fastConfig(inputs.NotifyTarget{URL: r.URL})
	s, err := New(cfg, Deps{Events: st, Cursor: st, Projects: projects{}, Logger: zap.NewNop(), Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	<-s.Following()
	appendEvent(t, st, store.Event{Type: store.EventHostDown, Host: "h1"})
	eventually(t, "the first delivery", func() bool { return len(r.received()) == 1 })
	eventually(t, "the cursor moved", func() bool { c, _ := st.NotifyCursor(t.Context()); return c > 0 })
	cancel()
	<-done

	// Recorded while nobody delivers; the next holder delivers it, and
	// not the first one again.
	appendEvent(t, st, store.Event{Type: store.EventHostUp, Host: "h1"})
	run(t, cfg, st, projects{}, zap.NewNop())
	eventually(t, "the second delivery", func() bool { return len(r.received()) == 2 })
	time.Sleep(50 * time.Millisecond)
	var types []string
	for _, d := range r.received() {
		types = append(types, d.header.Get(HeaderEvent))
	}
	if strings.Join(types, ",") != "host.down,host.up" {
		t.Fatalf("deliveries %v, want host.down then host.up, once each", types)
	}
}

func TestTheLoopStopsOnceItsLeaseIsLost(t *testing.T) {
	st := openStore(t)
	now := time.Now()
	if _, err := st.AcquireLease(t.Context(), store.Lease{Project: store.LoopsLease, Token: "a", Holder: "loops", Server: "srv-a",
		Since: now, Expires: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	r := newReceiver(t)
	s, err := New(fastConfig(inputs.NotifyTarget{URL: r.URL}), Deps{Events: st, Cursor: st, Projects: projects{}, Logger: zap.NewNop(), Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(store.WithFence(t.Context(), store.Fence{Project: store.LoopsLease, Token: "a"}))
	}()
	<-s.Following()
	appendEvent(t, st, store.Event{Type: store.EventHostDown, Host: "h1"})
	eventually(t, "a delivery", func() bool { return len(r.received()) == 1 })
	// Another server takes the loops over; the next event's cursor move is refused.
	if _, err := st.AcquireLease(t.Context(), store.Lease{Project: store.LoopsLease, Token: "b", Holder: "loops", Server: "srv-b",
		Since: now.Add(2 * time.Minute), Expires: now.Add(3 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	appendEvent(t, st, store.Event{Type: store.EventHostUp, Host: "h1"})
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the loop runs on after its lease was taken over")
	}
}

func TestSlackBodiesAreOneEscapedLine(t *testing.T) {
	body, err := Body(inputs.NotifySlack, store.Event{Seq: 7, Type: store.EventRolloutFailed, Project: "default/shop",
		Resource: "egg/web", Host: "h1", Message: "exit 1: <script> & co"})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	want := "*rollout.failed* default/shop egg/web host h1: exit 1: &lt;script&gt; &amp; co"
	if len(got) != 1 || got["text"] != want {
		t.Fatalf("slack body %s, want only {\"text\": %q}", body, want)
	}
}

func TestAReceiverVerifiesTheSignatureAndRefusesAReplay(t *testing.T) {
	body := []byte(`{"seq":1}`)
	now := time.Unix(1_800_000_000, 0)
	sig := Sign(secret, now.Unix(), body)
	if !strings.HasPrefix(sig, "sha256=") || len(sig) != len("sha256=")+64 {
		t.Fatalf("signature %q, want sha256=<64 hex>", sig)
	}
	ts := itoa(now.Unix())
	if err := Verify(secret, ts, sig, body, now.Add(time.Minute), 5*time.Minute); err != nil {
		t.Fatalf("a fresh delivery: %v", err)
	}
	for name, check := range map[string]error{
		"a replay an hour later":  Verify(secret, ts, sig, body, now.Add(time.Hour), 5*time.Minute),
		"a changed body":          Verify(secret, ts, sig, []byte(`{"seq":2}`), now, 5*time.Minute),
		"a changed timestamp":     Verify(secret, itoa(now.Unix()+1), sig, body, now, 5*time.Minute),
		"another key":             Verify([]byte("another key of sixteen"), ts, sig, body, now, 5*time.Minute),
		"a timestamp not numeric": Verify(secret, "yesterday", sig, body, now, 5*time.Minute),
	} {
		if check == nil {
			t.Errorf("%s verifies", name)
		}
	}
}

func TestTheServersTargetsAreCheckedAsItsFlags(t *testing.T) {
	cfg := fastConfig(inputs.NotifyTarget{URL: "http://hooks.example.com/x?token=s3cret"})
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "--notify #1") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("Validate = %v; want --notify #1 refused, its query not shown", err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func toString(v any) string { b, _ := json.Marshal(v); return string(b) }

// countingCursor counts the cursor's moves.
type countingCursor struct {
	st    store.NotifyCursor
	mu    sync.Mutex // guards moves
	moves []int64
}

func (c *countingCursor) NotifyCursor(ctx context.Context) (int64, error) {
	return c.st.NotifyCursor(ctx)
}

func (c *countingCursor) SetNotifyCursor(ctx context.Context, seq int64) error {
	c.mu.Lock()
	c.moves = append(c.moves, seq)
	c.mu.Unlock()
	return c.st.SetNotifyCursor(ctx, seq)
}

func (c *countingCursor) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.moves)
}

// Most events are notified to nobody: the cursor is not stored for each.
func TestTheCursorIsStoredAfterADeliveryNotAfterEveryEvent(t *testing.T) {
	st := openStore(t)
	r := newReceiver(t)
	cursor := &countingCursor{st: st}
	s, err := New(fastConfig(inputs.NotifyTarget{URL: r.URL}), Deps{Events: st, Cursor: cursor, Projects: projects{}, Logger: zap.NewNop(), Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-s.Following()
	if n := cursor.count(); n != 1 {
		t.Fatalf("%d moves at the start, want 1 (the start fixed)", n)
	}
	for range 20 {
		appendEvent(t, st, store.Event{Type: store.EventResourceCreated, Project: "default/shop", Resource: "egg/web"})
		time.Sleep(time.Millisecond)
	}
	seq := appendEvent(t, st, store.Event{Type: store.EventApplyFinished, Project: "default/shop"})
	eventually(t, "the delivery", func() bool { return len(r.received()) == 1 })
	eventually(t, "the cursor stored at the delivered event", func() bool {
		c, _ := st.NotifyCursor(t.Context())
		return c == seq
	})
	if n := cursor.count(); n != 2 {
		t.Fatalf("%d moves for 20 events notified to nobody and one delivered, want 2", n)
	}
}

func TestAFailedBackupOrRestoreReachesTheProjectsTargetAndADoneOneDoesNot(t *testing.T) {
	st := openStore(t)
	shop := newReceiver(t)
	run(t, fastConfig(), st, projects{"default/shop": {{URL: shop.URL}}}, zap.NewNop())

	appendEvent(t, st, store.Event{Type: store.EventBackupDone, Project: "default/shop", Resource: "volume/data"}) // not notified
	appendEvent(t, st, store.Event{Type: store.EventBackupFailed, Project: "default/shop", Resource: "volume/data", Message: "backup b1 failed: disk full", Actor: "schedule"})
	appendEvent(t, st, store.Event{Type: store.EventRestoreFailed, Project: "default/shop", Resource: "volume/data", Message: "restore r1 failed", Actor: "bob"})

	eventually(t, "the two failures delivered", func() bool { return len(shop.received()) == 2 })
	time.Sleep(50 * time.Millisecond) // nothing more comes
	var types []string
	for _, r := range shop.received() {
		var e api.Event
		if err := json.Unmarshal(r.body, &e); err != nil {
			t.Fatal(err)
		}
		types = append(types, e.Type+" "+e.Actor)
	}
	slices.Sort(types)
	if want := []string{"backup.failed schedule", "restore.failed bob"}; !slices.Equal(types, want) {
		t.Fatalf("delivered %v, want %v", types, want)
	}
}
