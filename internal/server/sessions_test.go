package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hatchery/hatchery/internal/apiclient"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/fleet"
	"github.com/hatchery/hatchery/internal/store"
)

// sessionWorld is a server whose hosts alpha and beta joined, alpha placed
// with web of default/shop and running its slot 0, reached over plain HTTP (the secure
// harness's recorder cannot be hijacked for a WebSocket).
type sessionWorld struct {
	sh                 *secureHarness
	admin, alpha, beta *client.Client
	alphaID, betaID    string
}

func newSessionWorld(t *testing.T, cfg Config) *sessionWorld {
	sh := newSecureHarness(t, cfg)
	joinTok, _ := sh.createJoinToken(time.Hour, 2)
	alphaID, alphaTok := sh.join(joinTok, "alpha")
	betaID, betaTok := sh.join(joinTok, "beta")
	sh.setDesired(alphaID, "") // web of default/shop, one replica
	report := `{"host_id": "` + alphaID + `", "containers": [{"workload": "default/shop/web", "slot": 0, "container_id": "c1", "state": "running"}]}`
	if resp := sh.doAs(alphaTok, "POST", "/api/v1/hosts/"+alphaID+"/status", strings.NewReader(report)); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("alpha's report: %d", resp.StatusCode)
	}
	hs := httptest.NewServer(sh.srv.Handler())
	t.Cleanup(hs.Close)
	w := &sessionWorld{sh: sh, alphaID: alphaID, betaID: betaID}
	for _, c := range []struct {
		dst   **client.Client
		token string
	}{{&w.admin, sh.token}, {&w.alpha, alphaTok}, {&w.beta, betaTok}} {
		cl, err := client.New(client.Config{Server: hs.URL, Token: c.token})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		*c.dst = cl
	}
	return w
}

func (w *sessionWorld) offers(t *testing.T, c *client.Client, host string) []contract.SessionOffer {
	t.Helper()
	var out contract.SessionOffers
	if err := c.Do(t.Context(), "GET", "/api/v1/hosts/"+host+"/sessions?wait=0s", nil, &out); err != nil {
		t.Fatalf("offers of %s: %v", host, err)
	}
	return out.Sessions
}

func streamPath(host, id string) string {
	return "/api/v1/hosts/" + host + "/sessions/" + url.PathEscape(id) + "/stream"
}

func wantStatus(t *testing.T, err error, status int, what string) {
	t.Helper()
	var apiErr *apiclient.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != status {
		t.Fatalf("%s: %v, want %d", what, err, status)
	}
}

func TestAnExecSessionIsPairedWithItsHostsStreamOnlyAndRelaysBothWays(t *testing.T) {
	w := newSessionWorld(t, DefaultConfig())
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	op, err := w.admin.Sessions().Exec(ctx, "default", "shop", "web", url.Values{"cmd": {"/bin/sh", "-c", "secret argument"}})
	if err != nil {
		t.Fatal(err)
	}
	defer op.CloseNow()

	if got := w.offers(t, w.beta, w.betaID); len(got) != 0 {
		t.Fatalf("beta was offered %+v, a session of alpha's", got)
	}
	got := w.offers(t, w.alpha, w.alphaID)
	if len(got) != 1 || got[0].Kind != contract.SessionExec || got[0].Exec.Slot != 0 || got[0].Actor != "admin" || len(got[0].ID) < 40 {
		t.Fatalf("alpha's offers %+v, want one exec of slot 0 by admin with a long ID", got)
	}
	id := got[0].ID
	if again := w.offers(t, w.alpha, w.alphaID); len(again) != 0 {
		t.Fatalf("the offer was made twice: %+v", again)
	}

	// Another host's stream is refused: under its own ID (no such session
	// for it) and under alpha's (its token may not act for alpha).
	_, err = w.beta.Dial(ctx, streamPath(w.betaID, id))
	wantStatus(t, err, http.StatusNotFound, "beta's stream for alpha's session")
	_, err = w.beta.Dial(ctx, streamPath(w.alphaID, id))
	wantStatus(t, err, http.StatusForbidden, "beta's stream in alpha's name")
	_, err = w.alpha.Dial(ctx, streamPath(w.alphaID, id+"x"))
	wantStatus(t, err, http.StatusNotFound, "a stream for a guessed ID")

	agent, err := w.alpha.Dial(ctx, streamPath(w.alphaID, id))
	if err != nil {
		t.Fatal(err)
	}
	defer agent.CloseNow()
	if _, err := w.alpha.Dial(ctx, streamPath(w.alphaID, id)); err == nil {
		t.Fatal("a second stream for the session was let in")
	}
	if err := agent.Write(ctx, websocket.MessageBinary, []byte("output")); err != nil {
		t.Fatal(err)
	}
	if typ, data, err := op.Read(ctx); err != nil || typ != websocket.MessageBinary || string(data) != "output" {
		t.Fatalf("the operator read %v %q %v, want the agent's output", typ, data, err)
	}
	if err := op.Write(ctx, websocket.MessageText, []byte(`{"width": 80, "height": 24}`)); err != nil {
		t.Fatal(err)
	}
	if typ, data, err := agent.Read(ctx); err != nil || typ != websocket.MessageText || !strings.Contains(string(data), "80") {
		t.Fatalf("the agent read %v %q %v, want the resize", typ, data, err)
	}
	// The agent's close, with its reason, reaches the operator.
	_ = agent.Close(4403, "exec is turned off on this host")
	_, _, err = op.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != 4403 || ce.Reason != "exec is turned off on this host" {
		t.Fatalf("the operator's stream ended with %v, want the agent's 4403 and reason", err)
	}

	all, err := w.sh.store.ListEvents(t.Context(), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var evs []store.Event
	for _, e := range all {
		if e.Type == fleet.EventExec {
			evs = append(evs, e)
		}
	}
	if len(evs) != 1 || evs[0].Actor != "admin" || evs[0].Host != w.alphaID ||
		!strings.Contains(evs[0].Message, "exec of sh (2 arguments) in web/0 on alpha") || strings.Contains(evs[0].Message, "secret") {
		t.Fatalf("exec events %+v, want one by admin naming sh and 2 arguments, never the arguments", evs)
	}
}

func TestSessionsAreLimitedPerHostAndTheOperatorGoingEndsTheAgentsStream(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Sessions.PerHost = 1
	w := newSessionWorld(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	op, err := w.admin.Sessions().Exec(ctx, "default", "shop", "web", url.Values{"cmd": {"sh"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.admin.Sessions().Exec(ctx, "default", "shop", "web", url.Values{"cmd": {"sh"}})
	wantStatus(t, err, http.StatusTooManyRequests, "a second session on a host allowed one")

	id := w.offers(t, w.alpha, w.alphaID)[0].ID
	agent, err := w.alpha.Dial(ctx, streamPath(w.alphaID, id))
	if err != nil {
		t.Fatal(err)
	}
	op.CloseNow() // the CLI killed
	if _, _, err := agent.Read(ctx); err == nil || websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("the agent's stream after the operator went: %v, want going away", err)
	}
	// The session's slot is free again.
	eventually(t, "the session's slot free again", func() bool {
		c, err := w.admin.Sessions().Exec(ctx, "default", "shop", "web", url.Values{"cmd": {"sh"}})
		if err != nil {
			return false
		}
		c.CloseNow()
		return true
	})
}

func TestLogsAndExecRequestsAreChecked(t *testing.T) {
	w := newSessionWorld(t, DefaultConfig())
	ctx := t.Context()
	for _, tc := range []struct {
		path, mentions string
		status         int
	}{
		{"/api/v1/projects/default/shop/eggs/web/exec", "cmd", 400},
		{"/api/v1/projects/default/shop/eggs/web/exec?cmd=sh&slot=x", "slot", 400},
		{"/api/v1/projects/default/shop/eggs/web/exec?cmd=sh&slot=3", "no running replica web/3", 404},
		{"/api/v1/projects/default/shop/eggs/db/exec?cmd=sh", "no running replica db", 404},
		{"/api/v1/projects/default/shop/eggs/web/exec?cmd=sh&host=beta", "no running replica web on host beta", 404},
		{"/api/v1/projects/default/shop/logs?since=yesterday", "since", 400},
		{"/api/v1/projects/default/shop/logs?slot=1", "slot", 400},
		{"/api/v1/projects/default/shop/logs?tail=-2", "tail", 400},
		{"/api/v1/projects/default/shop/logs?host=gamma", "gamma", 404},
		{"/api/v1/projects/default/shop/logs?run=r1", "run", 400},
		{"/api/v1/projects/default/shop/logs?egg=web&slot=0&run=r1", "run", 400},
	} {
		_, err := w.admin.Dial(ctx, tc.path)
		var apiErr *apiclient.APIError
		if !errors.As(err, &apiErr) || apiErr.StatusCode != tc.status || !strings.Contains(apiErr.Message, tc.mentions) {
			t.Errorf("%s: %v, want %d mentioning %q", tc.path, err, tc.status, tc.mentions)
		}
	}
}

func TestExecHostPicksTheReplicaOnThatHost(t *testing.T) {
	w := newSessionWorld(t, DefaultConfig())
	// beta runs a slot 0 of web too: slots are numbered per host.
	w.sh.setDesired(w.betaID, "")
	report := `{"host_id": "` + w.betaID + `", "containers": [{"workload": "default/shop/web", "slot": 0, "container_id": "c2", "state": "running"}]}`
	if err := w.beta.Do(t.Context(), "POST", "/api/v1/hosts/"+w.betaID+"/status", json.RawMessage(report), nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for _, host := range []string{"beta", w.betaID} {
		op, err := w.admin.Sessions().Exec(ctx, "default", "shop", "web", url.Values{"cmd": {"sh"}, "slot": {"0"}, "host": {host}})
		if err != nil {
			t.Fatal(err)
		}
		if got := w.offers(t, w.alpha, w.alphaID); len(got) != 0 {
			t.Fatalf("--host %s: alpha was offered %+v", host, got)
		}
		if got := w.offers(t, w.beta, w.betaID); len(got) != 1 || got[0].Exec.Slot != 0 {
			t.Fatalf("--host %s: beta's offers %+v, want the exec of its slot 0", host, got)
		}
		op.CloseNow()
	}
}
