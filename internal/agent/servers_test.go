package agent

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/pki/authority"
)

// A host joined through one server learns of the others from the
// desired-state answers, and when its server goes away its next poll is
// answered by a server it was never told of at the join.
func TestTheAgentFollowsTheServerListAndFailsOver(t *testing.T) {
	material, err := authority.LoadOrCreate(t.TempDir(), authority.DefaultNames(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var urls []string
	var mu sync.Mutex // guards urls, read by the handlers
	serve := func(name string) *httptest.Server {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			w.Header().Set(api.HeaderServers, strings.Join(urls, ","))
			mu.Unlock()
			d := contract.DesiredState{HostID: "h1", Version: "v-" + name}
			writeJSON(w, http.StatusOK, d)
		}))
		srv.TLS = material.TLSConfig()
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return srv
	}
	a, b := serve("a"), serve("b")
	mu.Lock()
	urls = []string{a.URL, b.URL}
	mu.Unlock()

	host := pki.NewToken(pki.KindHost, material.Fingerprint()).String()
	id := Identity{Server: a.URL, HostID: "h1", Token: host, CAFingerprint: material.Fingerprint()}
	cp, err := NewHTTPClient(id)
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	var told [][]string
	cp.OnServers(func(live []string, err error) {
		if err != nil {
			t.Error(err)
		}
		told = append(told, live)
	})
	d, err := cp.DesiredState(t.Context(), "", 0)
	if err != nil || d.Version != "v-a" {
		t.Fatalf("first poll: %+v, %v; want a's", d, err)
	}
	if len(told) != 1 || !slices.Equal(told[0], []string{a.URL, b.URL}) {
		t.Fatalf("told of %v, want the list once", told)
	}
	a.Close() // refuses connections from now on
	start := time.Now()
	d, err = cp.DesiredState(t.Context(), "v-a", time.Second)
	if err != nil || d.Version != "v-b" {
		t.Fatalf("poll after a went away: %+v, %v; want b's answer", d, err)
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("the poll went to b after %v", took)
	}
	if cp.Server() != b.URL || len(told) != 1 {
		t.Fatalf("the client talks to %s (want b), told %d times (the list did not change)", cp.Server(), len(told))
	}
}
