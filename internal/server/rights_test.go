package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/holds"
	"github.com/hatchery/hatchery/internal/store/sqlite"
)

// These tests hold polls and streams open against a started server, wired
// as `hatch server` wires it (admin, join and host tokens from the store),
// on the real clock and unbuffered (streams flush as they go), and end the
// rights under them (issue 24, findings 6 and 7).

// newRightsHarness is a started server over st (a new store when nil),
// serving through httptest.
func newRightsHarness(t *testing.T, st *sqlite.Store, serverID string) *secureHarness {
	t.Helper()
	dir := t.TempDir()
	if st == nil {
		var err error
		if st, err = sqlite.Open(t.Context(), filepath.Join(dir, "hatch.db"), zaptest.NewLogger(t)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
	}
	hash, admin, err := EnsureAdminToken(t.Context(), st, filepath.Join(dir, "admin-token"), fingerprint(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if admin == "" { // a second server of the store: the first made the token
		t.Fatal("newRightsHarness: give the second server the first one's admin token")
	}
	cfg := DefaultConfig()
	cfg.AuthFailureBurst = 1 << 20
	b := BuildTestServer(t, cfg, TestWiring{Dir: dir, Store: st, Auth: NewTokenAuth(hash, st, time.Now), ServerID: serverID,
		Logger: zaptest.NewLogger(t)})
	if err := b.Server.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(b.Server.Handler())
	t.Cleanup(hs.Close)
	sh := &secureHarness{t: t, logs: &lockedBuffer{}, hostCA: b.HostCA}
	sh.harness = &harness{t: t, srv: b.Server, http: hs, store: st, blobs: b.Blobs, box: b.Box, fleet: b.Fleet, token: admin}
	return sh
}

// joinedHost joins a host and gives it a desired state; it returns the
// host's ID, token and the version its agent would hold.
func (sh *secureHarness) joinedHost(name string) (id, token, version string) {
	sh.t.Helper()
	jt, _ := sh.createJoinToken(time.Hour, 1)
	id, token = sh.join(jt, name)
	putDesired(sh.t, sh.store, sh.box, contract.DesiredState{HostID: id, Workloads: []contract.WorkloadSpec{{
		Namespace: "default", Project: "shop", Egg: "web", Image: "web:1", Replicas: 1, Port: 8080}}})
	return id, token, sh.version(id, token)
}

// version is the version of the host's desired state now.
func (sh *secureHarness) version(id, token string) string {
	sh.t.Helper()
	return decode[contract.DesiredState](sh.t, sh.doAs(token, "GET", "/api/v1/hosts/"+id+"/desired-state", nil), http.StatusOK).Version
}

// answer is a long-poll's status and body.
type pollAnswer struct {
	status int
	body   string
	err    error
}

// poll sends a request in the background; its answer comes on the channel.
func (sh *secureHarness) poll(ctx context.Context, token, path string) <-chan pollAnswer {
	out := make(chan pollAnswer, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, "GET", sh.http.URL+path, nil)
		if err != nil {
			out <- pollAnswer{err: err}
			return
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- pollAnswer{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		out <- pollAnswer{status: resp.StatusCode, body: string(body), err: err}
	}()
	return out
}

// within waits for n answers for at most d, and returns them.
func within(t *testing.T, d time.Duration, n int, answers []<-chan pollAnswer) []pollAnswer {
	t.Helper()
	got := make(chan pollAnswer, len(answers))
	for _, a := range answers {
		go func() {
			select {
			case v := <-a:
				got <- v
			case <-t.Context().Done():
			}
		}()
	}
	var out []pollAnswer
	timeout := time.After(d)
	for len(out) < n {
		select {
		case v := <-got:
			out = append(out, v)
		case <-timeout:
			t.Fatalf("%d of %d answers came within %v", len(out), n, d)
		}
	}
	return out
}

// Finding 6: one host token held 5,000 desired-state long-polls. Now a host
// holds pollsPerHost; each newer poll answers the oldest at once (304), so
// the 50 a rogue host opens cost the server two.
func TestAHostHoldsAtMostTwoDesiredStatePolls(t *testing.T) {
	sh := newRightsHarness(t, nil, "srv-a")
	id, token, version := sh.joinedHost("rogue")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var answers []<-chan pollAnswer
	for range 50 {
		answers = append(answers, sh.poll(ctx, token, "/api/v1/hosts/"+id+"/desired-state?wait=60s&version="+version))
	}
	for _, a := range within(t, 10*time.Second, 48, answers) {
		if a.err != nil || a.status != http.StatusNotModified {
			t.Fatalf("a replaced poll got %d %q (%v), want 304", a.status, a.body, a.err)
		}
	}
	eventually(t, "the two newest polls waiting", func() bool { return gaugeValue(t, sh.srv.metrics.waiters) == pollsPerHost })
	if n := sh.srv.pollingHosts(); n != 1 {
		t.Fatalf("the peer spread counts %d polling hosts, want 1", n)
	}
	if m := readAll(t, sh.do("GET", "/metrics", nil).Body); !strings.Contains(m, "\nhatch_held_open 2\n") {
		t.Fatalf("/metrics does not say 2 held open:\n%s", m)
	}
}

// Finding 6, the spread: what spreads the answers to a new peer list counts
// the hosts polling, not their polls.
func TestThePeerSpreadCountsHostsNotPolls(t *testing.T) {
	sh := newRightsHarness(t, nil, "srv-a")
	a, aToken, _ := sh.joinedHost("alpha")
	b, bToken, bVersion := sh.joinedHost("beta")
	aVersion := sh.version(a, aToken) // beta's joining changed the peers
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	sh.poll(ctx, aToken, "/api/v1/hosts/"+a+"/desired-state?wait=60s&version="+aVersion)
	sh.poll(ctx, aToken, "/api/v1/hosts/"+a+"/desired-state?wait=60s&version="+aVersion)
	sh.poll(ctx, bToken, "/api/v1/hosts/"+b+"/desired-state?wait=60s&version="+bVersion)
	eventually(t, "three polls waiting", func() bool { return gaugeValue(t, sh.srv.metrics.waiters) == 3 })
	if n := sh.srv.pollingHosts(); n != 2 {
		t.Fatalf("the peer spread counts %d for 2 hosts holding 3 polls, want 2", n)
	}
}

// Finding 6, the sessions poll: the same bound, a replaced poll answered an
// empty list at once.
func TestAHostHoldsAtMostTwoSessionPolls(t *testing.T) {
	sh := newRightsHarness(t, nil, "srv-a")
	id, token, _ := sh.joinedHost("rogue")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var answers []<-chan pollAnswer
	for range 50 {
		answers = append(answers, sh.poll(ctx, token, "/api/v1/hosts/"+id+"/sessions?wait=60s"))
	}
	for _, a := range within(t, 10*time.Second, 48, answers) {
		if a.err != nil || a.status != http.StatusOK || !strings.Contains(a.body, `"sessions":[]`) {
			t.Fatalf("a replaced sessions poll got %d %q (%v), want 200 and no sessions", a.status, a.body, a.err)
		}
	}
}

// Finding 7: a removed host's pending poll was answered 200 with its new
// state. Now it is told it was removed.
func TestARemovedHostsPendingPollIsRefused(t *testing.T) {
	sh := newRightsHarness(t, nil, "srv-a")
	id, token, version := sh.joinedHost("gone")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	desired := sh.poll(ctx, token, "/api/v1/hosts/"+id+"/desired-state?wait=60s&version="+version)
	offers := sh.poll(ctx, token, "/api/v1/hosts/"+id+"/sessions?wait=60s")
	eventually(t, "the polls held", func() bool {
		return gaugeValue(t, sh.srv.metrics.waiters) == 1 && sh.srv.holds.Len() == 2
	})
	decode[api.RemovedHost](t, sh.do("DELETE", "/api/v1/hosts/"+id, nil), http.StatusOK)
	for _, a := range within(t, 5*time.Second, 2, []<-chan pollAnswer{desired, offers}) {
		if a.err != nil || a.status != http.StatusUnauthorized || !strings.Contains(a.body, "was removed") {
			t.Fatalf("a removed host's pending poll got %d %q (%v), want 401 saying it was removed", a.status, a.body, a.err)
		}
	}
}

// followEvents opens the event stream as token and sends each event's type
// as it comes; the channel closes when the stream ends.
func (sh *secureHarness) followEvents(ctx context.Context, token string) <-chan string {
	sh.t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", sh.http.URL+"/api/v1/events?follow=1", nil)
	if err != nil {
		sh.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		sh.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		sh.t.Fatalf("follow events: %d", resp.StatusCode)
	}
	types := make(chan string, 100)
	go func() {
		defer resp.Body.Close()
		defer close(types)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if typ, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				types <- typ
			}
		}
	}()
	return types
}

// endsWithout reads a stream's event types until it ends, failing if it
// outlives d or carries one of the types refused.
func endsWithout(t *testing.T, types <-chan string, d time.Duration, refused ...string) {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case typ, ok := <-types:
			if !ok {
				return
			}
			for _, r := range refused {
				if typ == r {
					t.Fatalf("the revoked token's stream received a %s event", typ)
				}
			}
		case <-timeout:
			t.Fatalf("the revoked token's stream was still open %v after its revocation", d)
		}
	}
}

// Finding 7: a revoked admin token's events?follow=1 stream kept receiving
// events, the creation of a new token among them. Now it ends, and nothing
// recorded from the revocation on reaches it.
func TestARevokedTokensEventStreamEnds(t *testing.T) {
	sh := newRightsHarness(t, nil, "srv-a")
	ci := sh.createAdminToken(sh.token, "ci")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	types := sh.followEvents(ctx, ci)
	if typ := <-types; typ != "token.created" { // the stream is live
		t.Fatalf("first event %q, want token.created", typ)
	}
	other := sh.followEvents(ctx, sh.token)
	<-other
	decode[api.AdminToken](t, sh.do("DELETE", "/api/v1/admin-tokens/ci", nil), http.StatusOK)
	sh.createAdminToken(sh.token, "after")
	endsWithout(t, types, 5*time.Second, "token.revoked", "token.created")
	// The first token's stream goes on: it gets the revocation and the new token.
	for _, want := range []string{"token.revoked", "token.created"} {
		select {
		case got := <-other:
			if got != want {
				t.Fatalf("the admin's stream got %q, want %q", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the admin's stream got no %s", want)
		}
	}
}

// Finding 7 with several servers: a revocation or a removal made through
// server A ends what is held on server B, which learns of it from the store
// they share (on PostgreSQL, through its notifications).
func TestARevocationOnOneServerEndsWhatIsHeldOnAnother(t *testing.T) {
	a := newRightsHarness(t, nil, "srv-a")
	b := newRightsHarnessOf(t, a, "srv-b")
	ci := a.createAdminToken(a.token, "ci")
	id, hostToken, _ := a.joinedHost("gone")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	types := b.followEvents(ctx, ci)
	<-types
	offers := b.poll(ctx, hostToken, "/api/v1/hosts/"+id+"/sessions?wait=60s")
	eventually(t, "the stream and the poll held on server B", func() bool { return b.srv.holds.Len() == 2 })
	decode[api.AdminToken](t, a.do("DELETE", "/api/v1/admin-tokens/ci", nil), http.StatusOK)
	endsWithout(t, types, 5*time.Second)
	decode[api.RemovedHost](t, a.do("DELETE", "/api/v1/hosts/"+id, nil), http.StatusOK)
	if got := within(t, 5*time.Second, 1, []<-chan pollAnswer{offers})[0]; got.status != http.StatusUnauthorized {
		t.Fatalf("the removed host's poll on server B got %d %q, want 401", got.status, got.body)
	}
	eventually(t, "server B's holds released", func() bool { return b.srv.holds.Len() == 0 })
}

// newRightsHarnessOf is a second server over the first one's store, with its
// admin token.
func newRightsHarnessOf(t *testing.T, first *secureHarness, serverID string) *secureHarness {
	t.Helper()
	dir := t.TempDir()
	hash, err := first.store.TokenHash(t.Context(), AdminTokenName)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.AuthFailureBurst = 1 << 20
	b := BuildTestServer(t, cfg, TestWiring{Dir: dir, Store: first.store, Box: first.box, Auth: NewTokenAuth(hash, first.store, time.Now),
		ServerID: serverID, Logger: zaptest.NewLogger(t)})
	if err := b.Server.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(b.Server.Handler())
	t.Cleanup(hs.Close)
	sh := &secureHarness{t: t, logs: &lockedBuffer{}, hostCA: b.HostCA}
	sh.harness = &harness{t: t, srv: b.Server, http: hs, store: first.store, blobs: b.Blobs, box: first.box, fleet: b.Fleet,
		token: first.token}
	return sh
}

// An admin token follows at most eventStreamsPerToken event streams on one
// server: a newer one ends the oldest.
func TestATokensEventStreamsAreBounded(t *testing.T) {
	sh := newRightsHarness(t, nil, "srv-a")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var streams []<-chan string
	for range eventStreamsPerToken + 1 {
		streams = append(streams, sh.followEvents(ctx, sh.token))
	}
	eventually(t, fmt.Sprintf("%d streams held", eventStreamsPerToken), func() bool {
		return sh.srv.holds.Len() == eventStreamsPerToken
	})
	endsWithout(t, streams[0], 5*time.Second)
}

// execPair opens an exec session of web as opToken and pairs it with the
// host's stream; it returns both ends, live (a message crossed).
func (sh *secureHarness) execPair(ctx context.Context, opToken, hostID, hostToken string) (op, agent *websocket.Conn) {
	t := sh.t
	t.Helper()
	opClient, hostClient := sh.client(opToken), sh.client(hostToken)
	op, err := opClient.Sessions().Exec(ctx, "default", "shop", "web", url.Values{"cmd": {"sh"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { op.CloseNow() })
	var offers contract.SessionOffers
	if err := hostClient.Do(ctx, "GET", "/api/v1/hosts/"+hostID+"/sessions?wait=0s", nil, &offers); err != nil || len(offers.Sessions) != 1 {
		t.Fatalf("the host's offers: %+v, %v", offers, err)
	}
	agent, err = hostClient.Dial(ctx, streamPath(hostID, offers.Sessions[0].ID))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.CloseNow() })
	if err := agent.Write(ctx, websocket.MessageBinary, []byte("$ ")); err != nil {
		t.Fatal(err)
	}
	if _, data, err := op.Read(ctx); err != nil || string(data) != "$ " {
		t.Fatalf("the operator read %q, %v", data, err)
	}
	return op, agent
}

// client is an API client with the token.
func (sh *secureHarness) client(token string) *client.Client {
	sh.t.Helper()
	c, err := client.New(client.Config{Server: sh.http.URL, Token: token})
	if err != nil {
		sh.t.Fatal(err)
	}
	sh.t.Cleanup(c.Close)
	return c
}

// closedWithin reads a WebSocket until it ends, failing if it is still open
// after d; it returns how it ended.
func closedWithin(t *testing.T, c *websocket.Conn, d time.Duration, what string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	for {
		if _, _, err := c.Read(ctx); err != nil {
			if ctx.Err() != nil {
				t.Fatalf("%s still open %v after the right ended", what, d)
			}
			return err
		}
	}
}

// Finding 7, sessions: a revoked token's exec session ends, both ways; a
// removed host's session stream is closed with 1008, and the operator's
// session with it.
func TestSessionsEndWithTheirRight(t *testing.T) {
	sh := newRightsHarness(t, nil, "srv-a")
	id, hostToken, _ := sh.joinedHost("alpha")
	report := `{"host_id": "` + id + `", "containers": [{"workload": "default/shop/web", "slot": 0, "container_id": "c1", "state": "running"}]}`
	if resp := sh.doAs(hostToken, "POST", "/api/v1/hosts/"+id+"/status", strings.NewReader(report)); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("the host's report: %d", resp.StatusCode)
	}
	ci := sh.createAdminToken(sh.token, "ci")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	op, agent := sh.execPair(ctx, ci, id, hostToken)
	decode[api.AdminToken](t, sh.do("DELETE", "/api/v1/admin-tokens/ci", nil), http.StatusOK)
	closedWithin(t, op, 5*time.Second, "the revoked token's exec session")
	closedWithin(t, agent, 5*time.Second, "the host's stream of the revoked token's session")

	op, agent = sh.execPair(ctx, sh.token, id, hostToken)
	decode[api.RemovedHost](t, sh.do("DELETE", "/api/v1/hosts/"+id, nil), http.StatusOK)
	if err := closedWithin(t, agent, 5*time.Second, "the removed host's session stream"); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("the removed host's session stream ended with %v, want 1008", err)
	}
	closedWithin(t, op, 5*time.Second, "the operator's session with a removed host")
	eventually(t, "nothing held", func() bool { return sh.srv.holds.Len() == 0 })
}

// The fleet's answer to "whose right ended" that the rights check acts on:
// revoked and unknown tokens, removed and unknown hosts; never the first
// admin token, a live token or a member host.
func TestEndedRightsAreTheRevokedRemovedAndUnknown(t *testing.T) {
	sh := newRightsHarness(t, nil, "srv-a")
	sh.createAdminToken(sh.token, "ci")
	sh.createAdminToken(sh.token, "ops")
	decode[api.AdminToken](t, sh.do("DELETE", "/api/v1/admin-tokens/ci", nil), http.StatusOK)
	member, _, _ := sh.joinedHost("alpha")
	gone, _, _ := sh.joinedHost("beta")
	decode[api.RemovedHost](t, sh.do("DELETE", "/api/v1/hosts/"+gone, nil), http.StatusOK)

	got, err := sh.fleet.EndedRights(t.Context(), []string{"admin", "ci", "ops", "nobody"}, []string{member, gone, "h-unknown"})
	if err != nil {
		t.Fatal(err)
	}
	var ended []string
	for _, g := range got {
		ended = append(ended, g.AdminToken+g.Host)
		if g.Reason == "" {
			t.Errorf("%+v: no reason to tell its holder", g)
		}
	}
	want := []string{"ci", "nobody", gone, "h-unknown"}
	if strings.Join(ended, ",") != strings.Join(want, ",") {
		t.Fatalf("ended rights %v, want %v", ended, want)
	}
}

// Finding 7, an apply's progress stream: followed with a token revoked
// meanwhile, it ends though the apply goes on.
func TestARevokedTokensApplyProgressStreamEnds(t *testing.T) {
	sh := newRightsHarness(t, nil, "srv-a")
	id, hostToken, _ := sh.joinedHost("alpha")
	if resp := sh.doAs(hostToken, "POST", "/api/v1/hosts/"+id+"/status", strings.NewReader(`{"host_id": "`+id+`"}`)); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("the host's report: %d", resp.StatusCode)
	}
	ci := sh.createAdminToken(sh.token, "ci")
	// web waits for db to be healthy, which the host never reports: the
	// apply goes on.
	plan := decode[api.Plan](t, sh.doAs(ci, "POST", "/api/v1/projects/default/shop/plan", bytes.NewReader(planBody(t, waitingYAML, nil))),
		http.StatusCreated)
	started := decode[api.ApplyStarted](t, sh.doAs(ci, "POST", "/api/v1/projects/default/shop/apply", strings.NewReader(`{"plan":"`+plan.ID+`"}`)),
		http.StatusAccepted)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", sh.http.URL+started.Events, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+ci)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("follow the apply: %v %v", resp, err)
	}
	defer resp.Body.Close()
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	eventually(t, "the stream held", func() bool { return sh.srv.holds.Count(holds.AdminTokenNamed("ci"), endpointApplyProgress) == 1 })
	decode[api.AdminToken](t, sh.do("DELETE", "/api/v1/admin-tokens/ci", nil), http.StatusOK)
	timeout := time.After(5 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				last := decode[api.ApplyStatus](t, sh.do("GET", "/api/v1/projects/default/shop/applies/"+fmt.Sprint(started.Apply.ID), nil), http.StatusOK)
				if !last.Apply.Finished.IsZero() {
					t.Fatalf("the apply finished (%s): the stream may have ended with it, not with the token", last.Apply.Outcome)
				}
				return
			}
			if strings.HasPrefix(line, "event: done") {
				t.Fatal("the apply finished: the test proves nothing")
			}
		case <-timeout:
			t.Fatal("the revoked token's apply stream was still open 5s after the revocation")
		}
	}
}
