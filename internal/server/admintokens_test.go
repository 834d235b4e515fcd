package server

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/store"
)

// createAdminToken makes a named admin token through the API as the token by.
func (sh *secureHarness) createAdminToken(by, name string) string {
	sh.t.Helper()
	got := decode[api.AdminToken](sh.t, sh.doAs(by, "POST", "/api/v1/admin-tokens", strings.NewReader(`{"name": "`+name+`"}`)),
		http.StatusCreated)
	if got.Name != name || got.Token == "" || got.First {
		sh.t.Fatalf("created %+v, want a token named %s", got, name)
	}
	sh.remember(got.Token)
	return got.Token
}

func TestNamedAdminTokensActAsAdminsAndEventsSayWhichOneActed(t *testing.T) {
	sh := newSecureHarness(t, DefaultConfig())
	alice := sh.createAdminToken(sh.token, "alice")
	bob := sh.createAdminToken(alice, "bob")

	// alice may do what the admin does, and what she does is recorded as hers.
	joinTok, _ := sh.createJoinToken(time.Hour, 1)
	hostID, _ := sh.join(joinTok, "alpha")
	decode[api.RemovedHost](t, sh.doAs(alice, "DELETE", "/api/v1/hosts/"+hostID, nil), http.StatusOK)
	evs := decode[api.EventList](t, sh.do("GET", "/api/v1/events", nil), http.StatusOK).Events
	actors := map[string]string{}
	for _, e := range evs {
		actors[e.Type] = e.Actor
	}
	want := map[string]string{string(store.EventTokenCreated): "alice", // bob, made by alice, the last token.created
		string(store.EventHostJoined): "", string(store.EventHostRemoved): "alice"}
	for typ, actor := range want {
		if got, ok := actors[typ]; !ok || got != actor {
			t.Fatalf("%s by %q (recorded: %v), want by %q; events %+v", typ, got, ok, actor, evs)
		}
	}

	tokens := decode[api.AdminTokenList](t, sh.doAs(bob, "GET", "/api/v1/admin-tokens", nil), http.StatusOK).AdminTokens
	if len(tokens) != 3 || tokens[0].Name != "admin" || !tokens[0].First || tokens[1].Name != "alice" || tokens[2].Name != "bob" {
		t.Fatalf("admin tokens %+v, want admin (first), alice, bob", tokens)
	}
	for _, tok := range tokens {
		if tok.Token != "" {
			t.Fatalf("the list shows a token itself: %+v", tok)
		}
	}

	// bob revokes alice: she is refused at once, saying why; nobody revokes the first.
	sh.clock.Set(sh.clock.Now().Add(time.Second))
	revoked := decode[api.AdminToken](t, sh.doAs(bob, "DELETE", "/api/v1/admin-tokens/alice", nil), http.StatusOK)
	if !revoked.RevokedAt.Equal(sh.clock.Now()) {
		t.Fatalf("revoked %+v, want revoked now", revoked)
	}
	wantError(t, sh.doAs(alice, "GET", "/api/v1/hosts", nil), http.StatusUnauthorized, "unauthorized", `"alice" was revoked`)
	wantError(t, sh.doAs(bob, "DELETE", "/api/v1/admin-tokens/admin", nil), http.StatusForbidden, "forbidden", "way back in")
	decode[api.HostList](t, sh.do("GET", "/api/v1/hosts", nil), http.StatusOK)
	wantError(t, sh.doAs(bob, "DELETE", "/api/v1/admin-tokens/carol", nil), http.StatusNotFound, "not_found", "carol")
	sh.checkNoSecretLeaked()
}

func TestAdminTokenNamesAreCheckedAndNeverReused(t *testing.T) {
	sh := newSecureHarness(t, DefaultConfig())
	for _, name := range []string{"", "-x", "a b", "é", strings.Repeat("a", 64)} {
		resp := sh.do("POST", "/api/v1/admin-tokens", strings.NewReader(`{"name": "`+name+`"}`))
		wantError(t, resp, http.StatusBadRequest, "bad_request", "--name")
	}
	sh.createAdminToken(sh.token, "alice")
	decode[api.AdminToken](t, sh.do("DELETE", "/api/v1/admin-tokens/alice", nil), http.StatusOK)
	for _, name := range []string{"alice", "admin"} {
		resp := sh.do("POST", "/api/v1/admin-tokens", strings.NewReader(`{"name": "`+name+`"}`))
		wantError(t, resp, http.StatusConflict, "name_taken", "never reused")
	}
	sh.checkNoSecretLeaked()
}
