package server

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

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

// changingServers is a server list a test changes.
type changingServers struct {
	mu      sync.Mutex // guards list and changed
	list    []string
	changed chan struct{}
}

func (c *changingServers) Servers() ([]string, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.list, c.changed
}

func (c *changingServers) set(list ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.list = list
	close(c.changed)
	c.changed = make(chan struct{})
}

// A change of the server list ends a held long-poll with the new list: a
// server added is known to every host at once, not at its next poll.
func TestAChangeOfTheServerListEndsAHeldLongPoll(t *testing.T) {
	tok := pki.NewToken(pki.KindAdmin, fingerprint())
	w := TestWiring{AdminHash: tok.Hash(), Logger: zaptest.NewLogger(t)}
	list := &changingServers{list: []string{"https://a:7700"}, changed: make(chan struct{})}
	w.Servers = list
	b := BuildTestServer(t, DefaultConfig(), w)
	hs := httptest.NewServer(b.Server.Handler())
	t.Cleanup(hs.Close)
	answered := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, hs.URL+"/api/v1/hosts/h1/desired-state?version=&wait=60s", nil)
		req.Header.Set("Authorization", "Bearer "+tok.String())
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Error(err)
		}
		answered <- resp
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case <-answered:
		t.Fatal("the poll was answered before any change")
	default:
	}
	list.set("https://a:7700", "https://b:7700")
	select {
	case resp := <-answered:
		if resp == nil {
			return
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotModified || resp.Header.Get(api.HeaderServers) != "https://a:7700,https://b:7700" {
			t.Fatalf("status %d, %q; want 304 with the new list", resp.StatusCode, resp.Header.Get(api.HeaderServers))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held poll did not end when the server list changed")
	}
}
