package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/store"
)

func TestAJoinGivesAHostThatReadsItsDesiredStateAndReportsItsStatus(t *testing.T) {
	sh := newSecureHarness(t, DefaultConfig())
	joinTok, joinID := sh.createJoinToken(time.Hour, 1)
	if tok, err := pki.ParseToken(joinTok); err != nil || tok.Kind != pki.KindJoin || tok.Fingerprint != fingerprint() {
		t.Fatalf("join token %v (%v): want a join token carrying the CA's fingerprint", tok.Kind, err)
	}
	hostID, hostTok := sh.join(joinTok, "alpha")
	if tok, err := pki.ParseToken(hostTok); err != nil || tok.Kind != pki.KindHost || tok.Fingerprint != fingerprint() {
		t.Fatalf("host token %v (%v): want a host token carrying the CA's fingerprint", tok.Kind, err)
	}
	if !strings.HasPrefix(hostID, "h-") {
		t.Fatalf("host ID %q, want h-<hex>", hostID)
	}
	stored, err := sh.store.HostByTokenHash(t.Context(), pki.HashSecret(strings.Split(hostTok, ".")[1]))
	if err != nil || stored.ID != hostID || stored.Name != "alpha" || stored.JoinToken != joinID {
		t.Fatalf("stored host %+v, %v; want %s named alpha, joined with %s", stored, err, hostID, joinID)
	}

	sh.setDesired(hostID, digestOf([]byte("src")))
	state := decode[map[string]any](t, sh.doAs(hostTok, "GET", "/api/v1/hosts/"+hostID+"/desired-state", nil), http.StatusOK)
	if state["host_id"] != hostID {
		t.Fatalf("desired state %v, want the host's own", state)
	}
	report := `{"host_id": "` + hostID + `", "version": "", "containers": []}`
	if resp := sh.doAs(hostTok, "POST", "/api/v1/hosts/"+hostID+"/status", strings.NewReader(report)); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("status report: %d %s", resp.StatusCode, readAll(t, resp.Body))
	}

	hosts := decode[struct{ Hosts []api.Host }](t, sh.do("GET", "/api/v1/hosts", nil), http.StatusOK).Hosts
	if len(hosts) != 1 || hosts[0].ID != hostID || hosts[0].Name != "alpha" || hosts[0].State != "up" {
		t.Fatalf("hosts %+v, want alpha up", hosts)
	}
	tokens := decode[struct {
		JoinTokens []api.JoinToken `json:"join_tokens"`
	}](t, sh.do("GET", "/api/v1/join-tokens", nil), http.StatusOK).JoinTokens
	if len(tokens) != 1 || tokens[0].ID != joinID || tokens[0].Uses != 1 || tokens[0].State != store.JoinTokenUsedUp || tokens[0].Token != "" {
		t.Fatalf("join tokens %+v, want %s used up, without the token", tokens, joinID)
	}
	sh.checkNoSecretLeaked()
}

func TestAJoinTokenStopsWorkingWhenUsedUpExpiredOrRevoked(t *testing.T) {
	sh := newSecureHarness(t, DefaultConfig())
	twice, _ := sh.createJoinToken(time.Hour, 2)
	shortLived, _ := sh.createJoinToken(time.Minute, 5)
	revoked, revokedID := sh.createJoinToken(time.Hour, 5)

	sh.join(twice, "a1")
	sh.join(twice, "a2")
	sh.join(shortLived, "b1")
	decode[api.JoinToken](t, sh.do("DELETE", "/api/v1/join-tokens/"+revokedID, nil), http.StatusOK)
	sh.clock.Set(sh.clock.Now().Add(time.Minute))

	for _, tc := range []struct{ token, reason string }{
		{twice, "used up"}, {shortLived, "expired"}, {revoked, "revoked"},
	} {
		resp := sh.doAs(tc.token, "POST", "/api/v1/join", strings.NewReader(`{"name": "late"}`))
		wantError(t, resp, http.StatusUnauthorized, "unauthorized", tc.reason)
	}
	hosts, err := sh.store.ListHostIdentities(t.Context())
	if err != nil || len(hosts) != 3 {
		t.Fatalf("hosts %+v (%v), want the three that joined in time", hosts, err)
	}
	wantError(t, sh.do("DELETE", "/api/v1/join-tokens/nope", nil), http.StatusNotFound, "not_found", "nope")
	sh.checkNoSecretLeaked()
}

func TestAHostNameBelongsToOneMemberAtATime(t *testing.T) {
	sh := newSecureHarness(t, DefaultConfig())
	joinTok, _ := sh.createJoinToken(time.Hour, 10)
	first, _ := sh.join(joinTok, "alpha")

	resp := sh.doAs(joinTok, "POST", "/api/v1/join", strings.NewReader(`{"name": "alpha"}`))
	wantError(t, resp, http.StatusConflict, "name_taken", first)
	resp = sh.doAs(joinTok, "POST", "/api/v1/join", strings.NewReader(`{"name": "`+first+`"}`))
	wantError(t, resp, http.StatusConflict, "name_taken", first)

	decode[api.RemovedHost](t, sh.do("DELETE", "/api/v1/hosts/alpha", nil), http.StatusOK)
	second, _ := sh.join(joinTok, "alpha")
	if second == first {
		t.Fatal("the new alpha got the removed one's ID")
	}
	if tok := sh.joinTokenUses(joinTok); tok != 2 {
		t.Fatalf("join token used %d times, want 2 (refused joins spend nothing)", tok)
	}
}

// joinTokenUses returns how often the join token was used.
func (sh *secureHarness) joinTokenUses(token string) int {
	sh.t.Helper()
	tok, _ := pki.ParseToken(token)
	j, err := sh.store.JoinTokenByHash(sh.t.Context(), tok.Hash())
	if err != nil {
		sh.t.Fatal(err)
	}
	return j.Uses
}

func TestJoinChecksTheName(t *testing.T) {
	sh := newSecureHarness(t, DefaultConfig())
	joinTok, _ := sh.createJoinToken(time.Hour, 10)
	for _, bad := range []string{"-alpha", "alpha-", "al pha", "al_pha", strings.Repeat("a", 64), "ålpha"} {
		resp := sh.doAs(joinTok, "POST", "/api/v1/join", strings.NewReader(`{"name": "`+bad+`"}`))
		wantError(t, resp, http.StatusBadRequest, "bad_request", "name")
	}
	for _, good := range []string{"a", "web-1.eu-west.example.com", "MyMac", strings.Repeat("a", 63)} {
		sh.join(joinTok, good)
	}
	got := decode[api.JoinResponse](t, sh.doAs(joinTok, "POST", "/api/v1/join", strings.NewReader(`{}`)), http.StatusCreated)
	if got.Name != got.HostID {
		t.Fatalf("a host joined without a name is named %q, want its ID %q", got.Name, got.HostID)
	}
	if uses := sh.joinTokenUses(joinTok); uses != 5 {
		t.Fatalf("join token used %d times, want 5 (bad names spend nothing)", uses)
	}
}

func TestJoinTokenCreationChecksTheTTLAndUses(t *testing.T) {
	sh := newSecureHarness(t, DefaultConfig())
	for body, field := range map[string]string{
		`{"ttl": "0s"}`: "ttl", `{"ttl": "-1h"}`: "ttl", `{"ttl": "721h"}`: "ttl", `{"ttl": "soon"}`: "ttl",
		`{"uses": -1}`: "uses", `{"uses": 1001}`: "uses", `{"kind": "admin"}`: "kind",
	} {
		wantError(t, sh.do("POST", "/api/v1/join-tokens", strings.NewReader(body)), http.StatusBadRequest, "bad_request", field)
	}
	got := decode[api.JoinToken](t, sh.do("POST", "/api/v1/join-tokens", strings.NewReader(`{}`)), http.StatusCreated)
	sh.remember(got.Token)
	if got.MaxUses != 1 || !got.ExpiresAt.Equal(sh.clock.Now().Add(time.Hour)) || got.State != store.JoinTokenActive {
		t.Fatalf("default join token %+v, want one use for an hour", got)
	}
	if got.ID != store.JoinTokenID(pki.HashSecret(strings.Split(got.Token, ".")[1])) {
		t.Fatal("the token's ID is not derived from its hash: its holder could not name it")
	}
}

func TestRemovingAHostRefusesItsTokenAtOnce(t *testing.T) {
	sh := newSecureHarness(t, DefaultConfig())
	joinTok, _ := sh.createJoinToken(time.Hour, 1)
	hostID, hostTok := sh.join(joinTok, "alpha")
	sh.setDesired(hostID, digestOf([]byte("src")))
	path := "/api/v1/hosts/" + hostID + "/desired-state"
	decode[map[string]any](t, sh.doAs(hostTok, "GET", path, nil), http.StatusOK)

	sh.clock.Set(sh.clock.Now().Add(time.Second))
	removed := decode[api.RemovedHost](t, sh.do("DELETE", "/api/v1/hosts/alpha", nil), http.StatusOK)
	if removed.ID != hostID || !removed.RemovedAt.Equal(sh.clock.Now()) {
		t.Fatalf("removed %+v, want %s removed now", removed, hostID)
	}
	wantError(t, sh.doAs(hostTok, "GET", path, nil), http.StatusUnauthorized, "unauthorized", "was removed")

	hosts := decode[struct{ Hosts []api.Host }](t, sh.do("GET", "/api/v1/hosts", nil), http.StatusOK).Hosts
	if len(hosts) != 1 || !hosts[0].RemovedAt.Equal(removed.RemovedAt) {
		t.Fatalf("hosts %+v, want alpha shown removed", hosts)
	}
	sh.clock.Set(sh.clock.Now().Add(time.Minute))
	again := decode[api.RemovedHost](t, sh.do("DELETE", "/api/v1/hosts/"+hostID, nil), http.StatusOK)
	if !again.RemovedAt.Equal(removed.RemovedAt) {
		t.Fatalf("removing again moved the removal time to %v", again.RemovedAt)
	}
	wantError(t, sh.do("DELETE", "/api/v1/hosts/gamma", nil), http.StatusNotFound, "not_found", "gamma")
	evs, err := sh.store.ListEvents(t.Context(), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var removals int
	for _, e := range evs {
		if e.Type == store.EventHostRemoved && e.Host == hostID {
			removals++
		}
	}
	if removals != 1 {
		t.Fatalf("%d host.removed events, want 1", removals)
	}
	sh.checkNoSecretLeaked()
}

func TestAHostReadsOnlyTheBlobsItsDesiredStateReferences(t *testing.T) {
	sh := newSecureHarness(t, DefaultConfig())
	joinTok, _ := sh.createJoinToken(time.Hour, 2)
	alpha, alphaTok := sh.join(joinTok, "alpha")
	beta, betaTok := sh.join(joinTok, "beta")
	a, b := sh.putBlob("context A"), sh.putBlob("context B")
	sh.setDesired(alpha, a)
	sh.setDesired(beta, b)

	readable := func(token, digest string) []int {
		var codes []int
		for _, method := range []string{"HEAD", "GET"} {
			codes = append(codes, sh.doAs(token, method, "/api/v1/blobs/"+digest, nil).StatusCode)
		}
		return codes
	}
	ok, forbidden := []int{200, 200}, []int{403, 403}
	for _, tc := range []struct {
		who, token, digest string
		want               []int
	}{
		{"alpha its own", alphaTok, a, ok}, {"alpha beta's", alphaTok, b, forbidden},
		{"beta its own", betaTok, b, ok}, {"beta alpha's", betaTok, a, forbidden},
		{"alpha one nobody references", alphaTok, digestOf([]byte("none")), forbidden},
		{"the admin any", sh.token, a, ok},
	} {
		if got := readable(tc.token, tc.digest); !slices.Equal(got, tc.want) {
			t.Errorf("%s: HEAD, GET = %v, want %v", tc.who, got, tc.want)
		}
	}
	// The desired state moves to another blob: so does what the host may read.
	sh.setDesired(alpha, b)
	if got := readable(alphaTok, a); !slices.Equal(got, forbidden) {
		t.Errorf("alpha's old blob after a new desired state: %v, want %v", got, forbidden)
	}
	if got := readable(alphaTok, b); !slices.Equal(got, ok) {
		t.Errorf("alpha's new blob: %v, want %v", got, ok)
	}
}

// brokenLookup is a token store that cannot be read.
// brokenLookup fails every token lookup with its error.
type brokenLookup struct{ err error }

var errStoreDown = errors.New("database is locked")

func (b brokenLookup) JoinTokenByHash(context.Context, string) (store.JoinToken, error) {
	return store.JoinToken{}, b.err
}

func (b brokenLookup) HostByTokenHash(context.Context, string) (store.HostIdentity, error) {
	return store.HostIdentity{}, b.err
}

func (b brokenLookup) AdminTokenByHash(context.Context, string) (store.AdminToken, error) {
	return store.AdminToken{}, b.err
}

func TestAStoreFailureWhileAuthenticatingIsAServerErrorNotAFailedAuthentication(t *testing.T) {
	sh := newSecureHarness(t, DefaultConfig())
	sh.srv.limiter = newFailureLimiter(1, time.Hour) // one counted failure would lock the address out
	adminHash := pki.HashSecret(strings.Split(sh.token, ".")[1])
	sh.srv.deps.Auth = NewTokenAuth(adminHash, brokenLookup{errStoreDown}, sh.clock.Now)
	hostTok := pki.NewToken(pki.KindHost, fingerprint()).String()
	for range 3 {
		wantError(t, sh.doAs(hostTok, "GET", "/api/v1/hosts/h1/desired-state", nil), http.StatusInternalServerError, "internal", "log")
	}
	// The admin token needs no lookup: it still works, and the address was not limited.
	decode[map[string]any](t, sh.do("GET", "/api/v1/hosts", nil), http.StatusOK)
	if !strings.Contains(sh.logs.String(), errStoreDown.Error()) {
		t.Fatal("the store failure was not logged")
	}
	sh.remember(hostTok)
	sh.checkNoSecretLeaked()
}

// While the database is unreachable an agent's request is answered 503
// unavailable, as every other request then is, and logged as the
// database's absence at WARN, never as a failed authentication at ERROR
// (PostgreSQL down once logged every agent's report as one).
func TestAnUnreachableDatabaseWhileAuthenticatingIsAnswered503(t *testing.T) {
	sh := newSecureHarness(t, DefaultConfig())
	adminHash := pki.HashSecret(strings.Split(sh.token, ".")[1])
	sh.srv.deps.Auth = NewTokenAuth(adminHash, brokenLookup{fmt.Errorf("host by token: %w: connection refused", store.ErrUnavailable)}, sh.clock.Now)
	hostTok := pki.NewToken(pki.KindHost, fingerprint()).String()
	resp := sh.doAs(hostTok, "POST", "/api/v1/hosts/h1/status", strings.NewReader("{}"))
	if resp.Header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	wantError(t, resp, http.StatusServiceUnavailable, "unavailable", "database")
	if logs := sh.logs.String(); strings.Contains(logs, "authentication failed") || !strings.Contains(logs, "the database is unreachable") {
		t.Fatalf("the logs do not say the database is unreachable, or call it a failed authentication:\n%s", logs)
	}
	sh.remember(hostTok)
	sh.checkNoSecretLeaked()
}
