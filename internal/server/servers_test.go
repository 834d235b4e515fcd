package server

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/pki"
)

// Every desired-state answer, a held one that ends "not modified" too, names
// the live servers: the list a host keeps to fail over with.
func TestDesiredStateAnswersNameTheLiveServers(t *testing.T) {
	tok := pki.NewToken(pki.KindAdmin, fingerprint())
	b := BuildTestServer(t, DefaultConfig(), TestWiring{AdminHash: tok.Hash(), Logger: zaptest.NewLogger(t),
		ServerURLs: []string{"https://a:7700", "https://b:7700"}})
	hs := httptest.NewServer(b.Server.Handler())
	t.Cleanup(hs.Close)
	for _, c := range []struct {
		query  string
		status int
	}{{"version=v0", http.StatusOK}, {"version=&wait=20ms", http.StatusNotModified}} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, hs.URL+"/api/v1/hosts/h1/desired-state?"+c.query, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok.String())
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status || resp.Header.Get(api.HeaderServers) != "https://a:7700,https://b:7700" {
			t.Errorf("%s: status %d, %s %q; want %d and both servers", c.query, resp.StatusCode, api.HeaderServers,
				resp.Header.Get(api.HeaderServers), c.status)
		}
	}
}
