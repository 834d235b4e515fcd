package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/resource"
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

// createDeployToken makes a deploy token of namespace/project through the
// API as the token by.
func (sh *secureHarness) createDeployToken(by, name, namespace, project string, exec bool) string {
	sh.t.Helper()
	body, _ := json.Marshal(api.CreateAdminTokenRequest{Name: name, Kind: api.TokenKindDeploy, Namespace: namespace,
		Project: project, Exec: exec})
	got := decode[api.AdminToken](sh.t, sh.doAs(by, "POST", "/api/v1/admin-tokens", bytes.NewReader(body)), http.StatusCreated)
	if got.Name != name || got.Kind != api.TokenKindDeploy || got.Namespace != namespace || got.Project != project ||
		got.Exec != exec || !strings.HasPrefix(got.Token, "hatch-deploy.") {
		sh.t.Fatalf("created %+v, want a deploy token named %s of %s/%s (exec %v)", got, name, namespace, project, exec)
	}
	sh.remember(got.Token)
	return got.Token
}

func TestDeployTokensAreListedAndTheirRequestsRecordedAsTheirs(t *testing.T) {
	sh := newSecureHarness(t, DefaultConfig())
	ci := sh.createDeployToken(sh.token, "ci", "default", "shop", false)
	sh.createDeployToken(sh.token, "ops", "team", "api", true)
	other := sh.createDeployToken(sh.token, "other", "default", "other", false)

	tokens := decode[api.AdminTokenList](t, sh.do("GET", "/api/v1/admin-tokens", nil), http.StatusOK).AdminTokens
	var kinds []string
	for _, tok := range tokens {
		kinds = append(kinds, fmt.Sprintf("%s:%s:%s/%s:%v", tok.Name, tok.Kind, tok.Namespace, tok.Project, tok.Exec))
	}
	want := []string{"admin:admin:/:false", "ci:deploy:default/shop:false", "ops:deploy:team/api:true", "other:deploy:default/other:false"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("tokens %v, want %v", kinds, want)
	}

	// A blob it uploads is recorded with its project and name, once.
	content := "FROM scratch\nCOPY . /\n"
	d := digestOf([]byte(content))
	for _, status := range []int{http.StatusCreated, http.StatusOK} {
		decode[api.StoredBlob](t, sh.doAs(ci, "PUT", "/api/v1/blobs/"+d, strings.NewReader(content)), status)
	}
	if resp := sh.doAs(ci, "HEAD", "/api/v1/blobs/"+d, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("HEAD of the uploaded blob with its deploy token: %d", resp.StatusCode)
	}
	wantError(t, sh.doAs(ci, "GET", "/api/v1/blobs/"+d, nil), http.StatusForbidden, "forbidden", "may not call")

	// Its events are its project's only (the filter forced), with the
	// creation of its own token and the upload, by it.
	evs := decode[api.EventList](t, sh.doAs(ci, "GET", "/api/v1/events", nil), http.StatusOK).Events
	var got []string
	for _, e := range evs {
		if e.Project != "default/shop" {
			t.Fatalf("the deploy token of default/shop read an event of %q: %+v", e.Project, e)
		}
		got = append(got, e.Type+" by "+e.Actor)
	}
	if !slices.Equal(got, []string{"token.created by admin", "blob.uploaded by deploy:ci"}) {
		t.Fatalf("the deploy token's events %v, want its creation and its upload", got)
	}
	if again := decode[api.EventList](t, sh.doAs(ci, "GET", "/api/v1/events?project=default/shop", nil), http.StatusOK).Events; len(again) != len(evs) {
		t.Fatalf("with its own project named: %d events, want %d", len(again), len(evs))
	}
	wantError(t, sh.doAs(ci, "GET", "/api/v1/events?project=team/api", nil), http.StatusForbidden, "forbidden", "default/shop only")
	wantError(t, sh.do("GET", "/api/v1/events?project=shop", nil), http.StatusBadRequest, "bad_request", "<namespace>/<name>")
	adminView := decode[api.EventList](t, sh.do("GET", "/api/v1/events?project=team/api", nil), http.StatusOK).Events
	if len(adminView) != 1 || adminView[0].Type != "token.created" || adminView[0].Project != "team/api" {
		t.Fatalf("the admin's events of team/api %+v, want ops's creation", adminView)
	}

	// The project list is its own project only: none before it is deployed.
	if err := sh.store.PutResource(t.Context(), "default/shop", &resource.Deployed{ID: "w1", Type: "egg", Name: "web"}); err != nil {
		t.Fatal(err)
	}
	if err := sh.store.PutResource(t.Context(), "team/api", &resource.Deployed{ID: "w2", Type: "egg", Name: "web"}); err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]string{ci: "default/shop", other: "", sh.token: "default/shop team/api"} {
		var names []string
		for _, p := range decode[api.ProjectList](t, sh.doAs(tok, "GET", "/api/v1/projects", nil), http.StatusOK).Projects {
			names = append(names, p.Namespace+"/"+p.Name)
		}
		if strings.Join(names, " ") != want {
			t.Fatalf("projects listed %v, want %q", names, want)
		}
	}

	// Revoked: refused at once, saying which token and why.
	decode[api.AdminToken](t, sh.do("DELETE", "/api/v1/admin-tokens/ci", nil), http.StatusOK)
	wantError(t, sh.doAs(ci, "GET", "/api/v1/projects/default/shop", nil), http.StatusUnauthorized, "unauthorized",
		`deploy token "ci" of default/shop was revoked`)
	sh.checkNoSecretLeaked()
}

func TestDeployTokenRequestsAreChecked(t *testing.T) {
	sh := newSecureHarness(t, DefaultConfig())
	for body, mentions := range map[string]string{
		`{"name": "ci", "kind": "deploy", "namespace": "default"}`:                                     "project",
		`{"name": "ci", "kind": "deploy", "namespace": "Default", "project": "shop"}`:                  "namespace",
		`{"name": "ci", "kind": "deploy", "namespace": "default", "project": "../x"}`:                  "project",
		`{"name": "ci", "namespace": "default", "project": "shop"}`:                                    "admin token has no project",
		`{"name": "ci", "exec": true}`:                                                                 "admin token has no project",
		`{"name": "ci", "kind": "root"}`:                                                               "kind",
		`{"name": "a b", "kind": "deploy", "namespace": "default", "project": "shop"}`:                 "--name",
		`{"name": "admin", "kind": "deploy", "namespace": "default", "project": "shop", "exec": true}`: "never reused",
	} {
		resp := sh.do("POST", "/api/v1/admin-tokens", strings.NewReader(body))
		if resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusConflict {
			t.Fatalf("%s: %d, want refused", body, resp.StatusCode)
		}
		text := readAll(t, resp.Body)
		if !strings.Contains(text, mentions) {
			t.Fatalf("%s: %s, want it to mention %q", body, text, mentions)
		}
	}
	if all := decode[api.AdminTokenList](t, sh.do("GET", "/api/v1/admin-tokens", nil), http.StatusOK).AdminTokens; len(all) != 1 {
		t.Fatalf("refused requests made tokens: %+v", all)
	}
	// A deploy token's kind cannot be edited into an admin token's.
	ci := sh.createDeployToken(sh.token, "ci", "default", "shop", false)
	forged := "hatch-admin." + strings.TrimPrefix(ci, "hatch-deploy.")
	wantError(t, sh.doAs(forged, "GET", "/api/v1/hosts", nil), http.StatusUnauthorized, "unauthorized", "")
	// Nor may it make tokens, of either kind.
	body := `{"name": "more", "kind": "deploy", "namespace": "default", "project": "shop"}`
	wantError(t, sh.doAs(ci, "POST", "/api/v1/admin-tokens", strings.NewReader(body)), http.StatusForbidden, "forbidden", "")
	sh.checkNoSecretLeaked()
}

// Revoking a deploy token ends what it holds open at once, as for an admin
// token: its event stream ends with nothing recorded after the revocation.
func TestARevokedDeployTokensEventStreamEnds(t *testing.T) {
	sh := newRightsHarness(t, nil, "srv-a")
	ci := sh.createDeployToken(sh.token, "ci", "default", "shop", false)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	types := sh.followEvents(ctx, ci)
	if typ := <-types; typ != "token.created" { // the stream is live, with its own project's events
		t.Fatalf("first event %q, want token.created", typ)
	}
	decode[api.AdminToken](t, sh.do("DELETE", "/api/v1/admin-tokens/ci", nil), http.StatusOK)
	sh.createDeployToken(sh.token, "after", "default", "shop", false)
	endsWithout(t, types, 5*time.Second, "token.revoked", "token.created")
}
