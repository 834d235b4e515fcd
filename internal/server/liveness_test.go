package server

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/store"
)

func TestLivenessAfterAServerStart(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := &clock{now: t0}
	h := newHarness(t, DefaultConfig(), clk) // liveness timeout 6 s
	ctx := t.Context()
	// Before the server starts: h1 reported long ago (the server was down
	// meanwhile), h2 was already down, and h1 has a desired state.
	for _, id := range []string{"h1", "h2"} {
		if _, err := h.store.PutStatus(ctx, id, []byte(report(id)), t0.Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.store.MarkHostDown(ctx, "h2", t0, t0); err != nil {
		t.Fatal(err)
	}
	h.publish("h1", 2, "x")

	start := t0.Add(time.Minute)
	clk.Set(start)
	if err := h.srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// The start writes the valid host set into every state (an older
	// server's carry none); from there on, liveness changes nothing.
	want := decode[contract.DesiredState](t, h.do("GET", "/api/v1/hosts/h1/desired-state", nil), 200)
	if len(want.Peers) != 2 {
		t.Fatalf("after the start, h1's state lists peers %+v, want h1 and h2", want.Peers)
	}
	states := func() map[string]store.HostState {
		t.Helper()
		if err := h.fleet.CheckLiveness(ctx); err != nil {
			t.Fatal(err)
		}
		hosts, err := h.store.ListHosts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]store.HostState{}
		for _, x := range hosts {
			out[x.ID] = x.State
		}
		return out
	}
	// A host down before the start stays down (issue 26).
	if got := states(); got["h1"] != store.HostUnknown || got["h2"] != store.HostDown {
		t.Fatalf("right after the start: %v, want h1 unknown, h2 still down", got)
	}
	clk.Set(start.Add(5 * time.Second)) // within one liveness period of the start: nobody is down
	if got := states(); got["h1"] != store.HostUnknown {
		t.Fatalf("5 s after the start: %v, want still unknown", got)
	}
	clk.Set(start.Add(5500 * time.Millisecond)) // h1's agent reports again
	if resp := h.do("POST", "/api/v1/hosts/h1/status", strings.NewReader(report("h1"))); resp.StatusCode != 204 {
		t.Fatalf("status: %d", resp.StatusCode)
	}
	clk.Set(start.Add(7 * time.Second)) // h2 silent for a whole period since the start
	if got := states(); got["h1"] != store.HostUp || got["h2"] != store.HostDown {
		t.Fatalf("7 s after the start: %v, want h1 up, h2 down", got)
	}
	if v := hostsGauge(t, h.srv, "up"); v != 1 {
		t.Fatalf("hosts{state=up} = %v", v)
	}
	clk.Set(start.Add(12 * time.Second)) // h1 silent for 6.5 s
	if got := states(); got["h1"] != store.HostDown {
		t.Fatalf("h1 after 6.5 s of silence: %v, want down", got)
	}
	// Nobody being live never shrinks a desired state.
	got := decode[contract.DesiredState](t, h.do("GET", "/api/v1/hosts/h1/desired-state", nil), 200)
	if got.Version != want.Version || len(got.Workloads) != 1 || got.Workloads[0].Replicas != 2 {
		t.Fatalf("desired state of a down host = %+v, want it unchanged", got)
	}
	evs, err := h.store.ListEvents(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var h1 []store.EventType
	for _, e := range evs {
		if e.Host == "h1" {
			h1 = append(h1, e.Type)
		}
	}
	// No host.up at h1's first report after the start: it was never down
	// (issue 26).
	if want := []store.EventType{store.EventHostUp, store.EventHostUnknown, store.EventHostDown}; !slices.Equal(h1, want) {
		t.Fatalf("h1's events %v, want %v", h1, want)
	}
}

func TestEventsListAndFollow(t *testing.T) {
	cfg := DefaultConfig()
	cfg.KeepAlive = 50 * time.Millisecond
	h := newHarness(t, cfg, nil)
	ctx := t.Context()
	seq1, _ := h.store.AppendEvent(ctx, store.Event{Time: time.Now(), Type: store.EventApplyStarted, Project: "default/shop", Message: "one"})
	h.store.AppendEvent(ctx, store.Event{Time: time.Now(), Type: store.EventApplyFinished, Project: "default/shop", Message: "two"})

	list := decode[struct{ Events []api.Event }](t, h.do("GET", "/api/v1/events?since="+itoa(seq1), nil), 200)
	if len(list.Events) != 1 || list.Events[0].Message != "two" || list.Events[0].Type != "apply.finished" {
		t.Fatalf("events since %d = %+v", seq1, list.Events)
	}
	wantError(t, h.do("GET", "/api/v1/events?since=x", nil), 400, "bad_request", "since")
	wantError(t, h.do("GET", "/api/v1/events?limit=0", nil), 400, "bad_request", "limit")
	wantError(t, h.do("GET", "/api/v1/events?follow=yes", nil), 400, "bad_request", "follow")

	resp := h.do("GET", "/api/v1/events?follow=1&since="+itoa(seq1), nil)
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func(want string) {
		t.Helper()
		timeout := time.After(5 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("stream ended before %q", want)
				}
				if strings.Contains(l, want) {
					return
				}
			case <-timeout:
				t.Fatalf("no line with %q", want)
			}
		}
	}
	next(`"message":"two"`)
	next(": keep-alive")
	// A host coming up is recorded by the store and reaches the stream.
	h.do("POST", "/api/v1/hosts/h9/status", strings.NewReader(report("h9")))
	next("event: host.up")
	next(`"host":"h9"`)
	h.srv.Drain()
	for range lines { // the stream ends at the drain
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestEnsureAdminToken(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "admin-token")
	hash, fresh, err := EnsureAdminToken(ctx, h.store, path, fingerprint(), time.Now())
	if err != nil || fresh == "" {
		t.Fatalf("first EnsureAdminToken = %q, %q, %v; want a fresh token", hash, fresh, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, %v; want mode 0600", fi, err)
	}
	data, _ := os.ReadFile(path)
	if strings.TrimSpace(string(data)) != fresh {
		t.Fatal("the file does not hold the printed token")
	}
	tok, _ := pki.ParseToken(fresh)
	if hash != tok.Hash() || strings.Contains(hash, tok.Secret) {
		t.Fatal("the stored hash is not the secret's hash")
	}
	again, fresh2, err := EnsureAdminToken(ctx, h.store, path, fingerprint(), time.Now())
	if err != nil || fresh2 != "" || again != hash {
		t.Fatalf("second EnsureAdminToken = %q, %q, %v; want the same hash and nothing to print", again, fresh2, err)
	}
	auth := NewAdminToken(hash)
	if p, err := auth.Authenticate(ctx, fresh); err != nil || !p.Admin {
		t.Fatalf("the admin token is refused: %v", err)
	}
	forged := pki.Token{Kind: pki.KindAdmin, Secret: tok.Secret + "x", Fingerprint: tok.Fingerprint}
	if _, err := auth.Authenticate(ctx, forged.String()); err == nil {
		t.Fatal("a wrong secret is accepted")
	}
	asHost := pki.Token{Kind: pki.KindHost, Secret: tok.Secret, Fingerprint: tok.Fingerprint}
	if _, err := auth.Authenticate(ctx, asHost.String()); err == nil {
		t.Fatal("the admin secret is accepted as another kind of token")
	}

	t.Run("a file written before a crash is adopted", func(t *testing.T) {
		h2 := newHarness(t, DefaultConfig(), nil) // an empty store
		adopted, fresh, err := EnsureAdminToken(ctx, h2.store, path, fingerprint(), time.Now())
		if err != nil || fresh != "" || adopted != hash {
			t.Fatalf("EnsureAdminToken with an existing file = %q, %q, %v; want its hash, nothing printed", adopted, fresh, err)
		}
	})
}

func TestServeShutsDownGracefully(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	v1 := h.publish("h1", 1, "a")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- h.srv.Serve(ctx, ln) }()
	url := "http://" + ln.Addr().String()
	polled := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("GET", url+"/api/v1/hosts/h1/desired-state?version="+v1.Version+"&wait=60s", nil)
		req.Header.Set("Authorization", "Bearer "+h.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			polled <- -1
			return
		}
		resp.Body.Close()
		polled <- resp.StatusCode
	}()
	eventually(t, "a waiter", func() bool { return gaugeValue(t, h.srv.metrics.waiters) == 1 })
	cancel()
	select {
	case code := <-polled:
		if code != http.StatusNotModified {
			t.Fatalf("long-poll at shutdown: %d, want 304", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the long-poll held the shutdown")
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
}

// hostsGauge reads hatch_hosts{state=...} as the server's /metrics serves it.
func hostsGauge(t *testing.T, srv *Server, state string) float64 {
	t.Helper()
	families, err := srv.metrics.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "hatch_hosts" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "state" && l.GetValue() == state {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no hatch_hosts{state=%q} among the server's metrics", state)
	return 0
}

// hatch_hosts is the same on every server of one store, not only on the one
// running the loops: it is counted from the store's states when scraped.
func TestEveryServerOfOneStoreGivesTheSameHostCounts(t *testing.T) {
	ctx := t.Context()
	holder := BuildTestServer(t, DefaultConfig(), TestWiring{ServerID: "srv-a", LoopsLease: time.Minute})
	other := BuildTestServer(t, DefaultConfig(), TestWiring{Store: holder.Store, ServerID: "srv-b", LoopsLease: time.Minute})
	for _, id := range []string{"h1", "h2", "h3"} {
		if _, err := holder.Store.PutStatus(ctx, id, []byte(report(id)), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []Built{holder, other} {
		if err := b.Server.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !holder.Server.deps.Loops.Leading() || other.Server.deps.Loops.Leading() {
		t.Fatal("want srv-a, started first, to hold the loops and srv-b not")
	}
	// The holder's start made every host unknown; h1 reports again, and the
	// holder's monitor finds h2 silent.
	if _, err := holder.Store.PutStatus(ctx, "h1", []byte(report("h1")), time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Store.MarkHostDown(ctx, "h2", time.Now(), time.Now()); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]Built{"the loops' holder": holder, "the other server": other} {
		for state, want := range map[string]float64{"up": 1, "down": 1, "unknown": 1} {
			if got := hostsGauge(t, b.Server, state); got != want {
				t.Fatalf("%s gives hatch_hosts{state=%q} = %v, want %v", name, state, got, want)
			}
		}
	}
}
