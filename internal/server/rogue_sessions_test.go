package server

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hatchery/hatchery/internal/apiclient"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/fleet"
	"github.com/hatchery/hatchery/internal/store"
)

// Issue 24's findings 1, 2, 3 and 10, each through the rogue host harness:
// a host that joined for real lies with its own credentials.

const shopDB = "default/shop/db"

// TestAnExecGoesOnlyToAHostTheEggIsPlacedOn is finding 1: mallory, placed
// with web only, claims db's slot 0 while db really runs on alpha (slot 0
// still starting, slot 1 running). The operator's exec must reach alpha,
// never mallory; the lie is a host problem, acted on nowhere, and still in
// the report destroy waits on.
func TestAnExecGoesOnlyToAHostTheEggIsPlacedOn(t *testing.T) {
	w := newRogueWorld(t, DefaultConfig())
	alpha, mallory := w.joinHost("alpha"), w.joinHost("mallory")
	w.place(alpha, webOf("db", 2))
	w.place(mallory, webOf("web", 1))
	starting := running(shopDB, 0)
	starting.State, starting.Healthy = contract.StateStarting, false
	alpha.report(nil, starting, running(shopDB, 1))
	mallory.report(nil, running("default/shop/web", 0), running(shopDB, 0))

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	op, err := w.admin.Sessions().Exec(ctx, "default", "shop", "db", url.Values{"cmd": {"psql", "postgres://app:secret@db/app"}, "stdin": {"1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer op.CloseNow()
	if got := mallory.offers(); len(got) != 0 {
		t.Fatalf("mallory, placed with web only, was offered %+v: the operator's command line and input", got)
	}
	if got := alpha.offers(); len(got) != 1 || got[0].Exec == nil || got[0].Exec.Egg != "db" || got[0].Exec.Slot != 1 {
		t.Fatalf("alpha's offers %+v, want the exec of db's slot 1, the one it runs", got)
	}
	// Naming mallory, or the slot only mallory claims, finds nothing.
	for _, q := range []url.Values{{"host": {mallory.Name}}, {"slot": {"0"}}} {
		q.Set("cmd", "sh")
		_, err := w.admin.Sessions().Exec(ctx, "default", "shop", "db", q)
		wantStatus(t, err, http.StatusNotFound, "exec of db with "+q.Encode())
	}
	if got := mallory.offers(); len(got) != 0 {
		t.Fatalf("mallory was offered %+v", got)
	}

	// The claim is mallory's problem in `hatch hosts` and its detail.
	hosts, err := w.admin.Hosts().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		claims := slices.ContainsFunc(h.Errors, func(e string) bool { return strings.Contains(e, "not placed on it") && strings.Contains(e, shopDB) })
		if claims != (h.ID == mallory.ID) {
			t.Errorf("host %s's problems %q: the claim of db should be mallory's only", h.Name, h.Errors)
		}
	}
	// Project status counts no db replica of mallory's.
	st, _, err := w.admin.Projects().Status(ctx, "default", "shop")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range st.Eggs {
		for _, h := range e.Hosts {
			if e.Name == "db" && h.ID == mallory.ID {
				t.Errorf("db's status counts mallory: %+v", h)
			}
		}
	}
	// destroy waits for every container a host reports: the report keeps it.
	rep, err := w.admin.Hosts().Report(ctx, mallory.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(rep.Containers, func(c contract.ContainerStatus) bool { return c.WorkloadID == shopDB }) {
		t.Fatalf("mallory's stored report %+v lost its db container, which hatch destroy waits for", rep.Containers)
	}
}

// TestExecIsRefusedBeforeItIsRecordedOnAHostWithNoExec is finding 10: a
// host whose agent runs with --no-exec says so in its report; the server
// refuses the exec, offers nothing, and records no exec.started.
func TestExecIsRefusedBeforeItIsRecordedOnAHostWithNoExec(t *testing.T) {
	w := newRogueWorld(t, DefaultConfig())
	alpha := w.joinHost("alpha")
	w.place(alpha, webOf("web", 1))
	alpha.report(func(r *contract.StatusReport) { r.NoExec = true }, running("default/shop/web", 0))

	_, err := w.admin.Sessions().Exec(t.Context(), "default", "shop", "web", url.Values{"cmd": {"sh"}})
	var apiErr *apiclient.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusConflict || !strings.Contains(apiErr.Message, "--no-exec") {
		t.Fatalf("exec on a --no-exec host: %v, want 409 naming --no-exec", err)
	}
	if got := alpha.offers(); len(got) != 0 {
		t.Fatalf("alpha was offered %+v", got)
	}
	evs, err := w.sh.store.ListEvents(t.Context(), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(evs, func(e store.Event) bool { return e.Type == fleet.EventExec }) {
		t.Fatal("the event log claims an exec that never ran")
	}
}

// TestLogsAreAskedOfTheProjectsHostsAndHeldToWhatIsPlacedOnEach is finding
// 2: beta runs nothing of shop and is not asked; mallory, placed with web,
// forges alpha's name and db's records, and has its own Host stamped on
// what it may send; alpha's records come as they are.
func TestLogsAreAskedOfTheProjectsHostsAndHeldToWhatIsPlacedOnEach(t *testing.T) {
	w := newRogueWorld(t, DefaultConfig())
	alpha, beta, mallory := w.joinHost("alpha"), w.joinHost("beta"), w.joinHost("mallory")
	w.place(alpha, webOf("web", 1), webOf("db", 1))
	w.place(beta, contract.WorkloadSpec{Namespace: "default", Project: "other", Egg: "api", Image: "api:1", Replicas: 1})
	w.place(mallory, webOf("web", 1))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	op, err := w.admin.Sessions().Logs(ctx, "default", "shop", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer op.CloseNow()
	if got := beta.offers(); len(got) != 0 {
		t.Fatalf("beta, running nothing of shop, was offered %+v", got)
	}
	now := time.Now()
	for _, h := range []*rogueHost{alpha, mallory} {
		offer, err := h.awaitOffer(ctx)
		if err != nil || offer.Kind != contract.SessionLogs {
			t.Fatalf("%s's offer %+v (%v), want the logs", h.Name, offer, err)
		}
		conn, err := h.stream(ctx, offer.ID)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.CloseNow()
		if h == alpha {
			sendRecords(ctx, t, conn,
				contract.LogRecord{Time: now, Host: alpha.ID, Egg: "web", Line: "alpha web"},
				contract.LogRecord{Time: now, Host: alpha.ID, Egg: "db", Line: "alpha db"})
		} else {
			sendRecords(ctx, t, conn,
				contract.LogRecord{Time: now, Host: alpha.ID, Egg: "web", Line: "mallory as alpha"},
				contract.LogRecord{Time: now, Host: mallory.ID, Egg: "db", Line: "mallory's db"},
				contract.LogRecord{Time: now, Host: alpha.ID, Egg: "db", Line: "mallory's db as alpha"})
		}
		if err := conn.Write(ctx, websocket.MessageBinary, []byte("not a record")); err != nil {
			t.Fatal(err)
		}
		_ = conn.Close(websocket.StatusNormalClosure, "")
	}
	recs, err := readRecords(ctx, t, op)
	if err != nil {
		t.Fatalf("the logs stream: %v (records %+v)", err, recs)
	}
	got := map[string]string{}
	for _, r := range recs {
		got[r.Line] = r.Host
	}
	want := map[string]string{"alpha web": alpha.ID, "alpha db": alpha.ID, "mallory as alpha": mallory.ID}
	if len(got) != len(want) {
		t.Fatalf("records %+v, want only %v (line: host)", recs, want)
	}
	for line, host := range want {
		if got[line] != host {
			t.Errorf("record %q came from host %q, want %q", line, got[line], host)
		}
	}
}

// TestALogsFollowIsJoinedByAHostPlacedOnLater: following, a host placed on
// during the request (a roll onto a new host) is asked then, for its lines
// from the request's start.
func TestALogsFollowIsJoinedByAHostPlacedOnLater(t *testing.T) {
	w := newRogueWorld(t, DefaultConfig())
	alpha, beta := w.joinHost("alpha"), w.joinHost("beta")
	w.place(alpha, webOf("web", 1))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	start := time.Now()
	op, err := w.admin.Sessions().Logs(ctx, "default", "shop", url.Values{"follow": {"1"}, "tail": {"10"}})
	if err != nil {
		t.Fatal(err)
	}
	defer op.CloseNow()
	if _, err := alpha.awaitOffer(ctx); err != nil {
		t.Fatal(err)
	}
	if got := beta.offers(); len(got) != 0 {
		t.Fatalf("beta, running nothing of shop yet, was offered %+v", got)
	}
	w.place(beta, webOf("web", 1))
	offer, err := beta.awaitOffer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l := offer.Logs; l == nil || !l.Follow || l.Tail != -1 || l.Since.Before(start.Add(-time.Second)) {
		t.Fatalf("beta's offer %+v, want a follow of its lines since the request began", offer.Logs)
	}
	conn, err := beta.stream(ctx, offer.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	sendRecords(ctx, t, conn, contract.LogRecord{Time: time.Now(), Egg: "web", Event: "started", Container: "c2"})
	_, data, err := op.Read(ctx)
	if err != nil || !strings.Contains(string(data), `"started"`) || !strings.Contains(string(data), beta.ID) {
		t.Fatalf("the operator read %s (%v), want beta's replica started", data, err)
	}
}

// TestLogsReadMoreHostsThanTheAdminsSessionLimit is finding 3: one logs
// request is one session against its admin's limit, so 18 hosts are read
// with the default limit of 16, and two requests at once are two.
func TestLogsReadMoreHostsThanTheAdminsSessionLimit(t *testing.T) {
	cfg := DefaultConfig()
	w := newRogueWorld(t, cfg)
	var hosts []*rogueHost
	for i := range cfg.Sessions.PerActor + 2 {
		h := w.joinHost("h" + strings.Repeat("x", i))
		w.place(h, webOf("web", 1))
		hosts = append(hosts, h)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	op, err := w.admin.Sessions().Logs(ctx, "default", "shop", nil)
	if err != nil {
		t.Fatalf("logs of %d hosts: %v", len(hosts), err)
	}
	defer op.CloseNow()
	second, err := w.admin.Sessions().Logs(ctx, "default", "shop", url.Values{"egg": {"web"}})
	if err != nil {
		t.Fatalf("a second logs request at once: %v", err)
	}
	second.CloseNow()
	for _, h := range hosts {
		offer, err := h.awaitOffer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for offer.Logs.Egg == "web" { // the second request's, which went
			if offer, err = h.awaitOffer(ctx); err != nil {
				t.Fatal(err)
			}
		}
		conn, err := h.stream(ctx, offer.ID)
		if err != nil {
			t.Fatal(err)
		}
		sendRecords(ctx, t, conn, contract.LogRecord{Time: time.Now(), Egg: "web", Line: "from " + h.Name})
		_ = conn.Close(websocket.StatusNormalClosure, "")
	}
	recs, err := readRecords(ctx, t, op)
	if err != nil || len(recs) != len(hosts) {
		t.Fatalf("%d records (%v), want one from each of %d hosts: %+v", len(recs), err, len(hosts), recs)
	}
}

// TestAHostThatNeverOpensItsLogsStreamDelaysNoOther is finding 3's second
// half: alpha's records reach the operator while beta's stream never comes
// (the pairing timeout is far longer than the test waits).
func TestAHostThatNeverOpensItsLogsStreamDelaysNoOther(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Sessions.PairTimeout = time.Minute
	w := newRogueWorld(t, cfg)
	alpha, beta := w.joinHost("alpha"), w.joinHost("beta")
	w.place(alpha, webOf("web", 1))
	w.place(beta, webOf("web", 1))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	op, err := w.admin.Sessions().Logs(ctx, "default", "shop", url.Values{"follow": {"1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer op.CloseNow()
	if _, err := beta.awaitOffer(ctx); err != nil { // taken, never served
		t.Fatal(err)
	}
	offer, err := alpha.awaitOffer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := alpha.stream(ctx, offer.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	sendRecords(ctx, t, conn, contract.LogRecord{Time: time.Now(), Egg: "web", Line: "alpha is quick"})
	if _, data, err := op.Read(ctx); err != nil || !strings.Contains(string(data), "alpha is quick") {
		t.Fatalf("the operator read %s (%v) while beta's stream never came, want alpha's record", data, err)
	}
	// The operator leaving ends alpha's stream with the reason.
	op.CloseNow()
	if _, _, err := conn.Read(ctx); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("alpha's stream after the operator went: %v, want going away", err)
	}
}
