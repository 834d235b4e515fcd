package apiclient

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/pki/authority"
)

func TestParseServersTakesCommasAndRepeats(t *testing.T) {
	got := ParseServers("https://a:7700, https://b:7700/", "", "https://a:7700,https://c:7700")
	want := []string{"https://a:7700", "https://b:7700", "https://c:7700"}
	if !slices.Equal(got, want) {
		t.Fatalf("ParseServers = %v, want %v", got, want)
	}
	if JoinServers(got) != "https://a:7700,https://b:7700,https://c:7700" {
		t.Fatalf("JoinServers = %q", JoinServers(got))
	}
}

func TestTheBackOffDoublesFromASecondToThirtySeconds(t *testing.T) {
	for failures, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second,
		5: 16 * time.Second, 6: 30 * time.Second, 60: 30 * time.Second} {
		if got := downFor(failures); got != want {
			t.Errorf("downFor(%d) = %v, want %v", failures, got, want)
		}
	}
}

func TestTheRotation(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	urls := []string{"a", "b", "c"}
	names := func(r *rotation, now time.Time) []string {
		var out []string
		for _, i := range r.order(now) {
			out = append(out, r.urls[i])
		}
		return out
	}
	check := func(t *testing.T, r *rotation, now time.Time, want ...string) {
		t.Helper()
		if got := names(r, now); !slices.Equal(got, want) {
			t.Fatalf("order = %v, want %v", got, want)
		}
	}

	t.Run("the first listed is tried first", func(t *testing.T) {
		check(t, newRotation(urls), t0, "a", "b", "c")
	})
	t.Run("a failed server is left for the next, which stays active once it answers", func(t *testing.T) {
		r := newRotation(urls)
		r.failed(0, t0)
		check(t, r, t0, "b", "c", "a")
		r.answered(1)
		// a's back-off is over, but b answered: the poll stays on b.
		check(t, r, t0.Add(time.Minute), "b", "c", "a")
	})
	t.Run("a passed-over server comes back after its back-off, in list order", func(t *testing.T) {
		r := newRotation(urls)
		r.failed(0, t0) // a: 1 s
		check(t, r, t0.Add(999*time.Millisecond), "b", "c", "a")
		check(t, r, t0.Add(time.Second), "b", "c", "a") // b is active now; a is next after c
		r.failed(1, t0.Add(time.Second))                // b: 1 s; the active moves on to c
		check(t, r, t0.Add(time.Second), "c", "a", "b")
	})
	t.Run("with every server passed over, the soonest back goes first", func(t *testing.T) {
		r := newRotation(urls)
		r.failed(0, t0)
		r.failed(0, t0.Add(time.Second))           // a: 2 s from t0+1s, so until t0+3s
		r.failed(1, t0.Add(time.Second))           // b: until t0+2s
		r.failed(2, t0.Add(1500*time.Millisecond)) // c: until t0+2.5s
		check(t, r, t0.Add(1600*time.Millisecond), "b", "c", "a")
	})
	t.Run("repeated failures back off longer; an answer forgives", func(t *testing.T) {
		r := newRotation([]string{"a", "b"})
		for range 3 {
			r.failed(0, t0)
		}
		check(t, r, t0.Add(3*time.Second), "b", "a") // 4 s back-off
		check(t, r, t0.Add(4*time.Second), "b", "a") // back, after the active b
		r.answered(0)
		r.failed(0, t0.Add(10*time.Second))
		check(t, r, t0.Add(11*time.Second), "b", "a") // back after 1 s again: forgiven
	})
	t.Run("a new list keeps the active server and the back-offs of those kept", func(t *testing.T) {
		r := newRotation(urls)
		r.failed(0, t0)
		r.answered(2)
		r.set([]string{"a", "c", "d"})
		check(t, r, t0, "c", "d", "a")
		r.set([]string{"x", "y"})
		check(t, r, t0, "x", "y")
	})
}

// deadServer returns the URL of a loopback port nobody listens on.
func deadServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "https://" + addr
}

// twoServers serves h on two TLS servers with one CA, as replicas given the
// files of `hatch server init` are.
func twoServers(t *testing.T, a, b http.Handler) (*httptest.Server, *httptest.Server, string) {
	t.Helper()
	material, err := authority.LoadOrCreate(t.TempDir(), authority.DefaultNames(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var out []*httptest.Server
	for _, h := range []http.Handler{a, b} {
		srv := httptest.NewUnstartedServer(h)
		srv.TLS = material.TLSConfig()
		srv.StartTLS()
		t.Cleanup(srv.Close)
		out = append(out, srv)
	}
	return out[0], out[1], material.Fingerprint()
}

func TestSendGoesOnToTheNextServer(t *testing.T) {
	var gotA, gotB atomic.Int32
	var bodyB atomic.Value
	a, b, fp := twoServers(t,
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			gotA.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
		}),
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			gotB.Add(1)
			data, _ := io.ReadAll(r.Body)
			bodyB.Store(string(data))
			w.WriteHeader(http.StatusOK)
		}))
	tok := pki.NewToken(pki.KindAdmin, fp).String()

	t.Run("the first refuses connections: a POST goes to the second, body and all", func(t *testing.T) {
		c, err := New(JoinServers([]string{deadServer(t), b.URL}), tok)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		resp, err := c.Send(t.Context(), http.MethodPost, "/api/v1/x", bytes.NewReader([]byte("hello")), "text/plain")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || bodyB.Load() != "hello" {
			t.Fatalf("status %d, body at B %q", resp.StatusCode, bodyB.Load())
		}
		if c.Server() != b.URL {
			t.Fatalf("the client now talks to %s, want %s", c.Server(), b.URL)
		}
	})
	t.Run("a GET answered 503 goes to the next; a POST does not", func(t *testing.T) {
		c, err := New(a.URL+","+b.URL, tok)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		beforeB := gotB.Load()
		resp, err := c.Send(t.Context(), http.MethodGet, "/api/v1/x", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || gotB.Load() != beforeB+1 {
			t.Fatalf("GET: status %d, B got %d requests", resp.StatusCode, gotB.Load()-beforeB)
		}
		c2, err := New(a.URL+","+b.URL, tok)
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		beforeA, beforeB := gotA.Load(), gotB.Load()
		resp, err = c2.Send(t.Context(), http.MethodPost, "/api/v1/x", bytes.NewReader(nil), "")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || gotA.Load() != beforeA+1 || gotB.Load() != beforeB {
			t.Fatalf("POST: status %d; A got %d, B %d (a POST the server may have seen is not sent again)",
				resp.StatusCode, gotA.Load()-beforeA, gotB.Load()-beforeB)
		}
		// The next request goes to B first: A was passed over.
		if c2.Server() != b.URL {
			t.Fatalf("after A's 503 the client talks to %s, want %s", c2.Server(), b.URL)
		}
	})
	t.Run("every server dead: the error names the last", func(t *testing.T) {
		c, err := New(deadServer(t)+","+deadServer(t), tok)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Send(t.Context(), http.MethodGet, "/api/v1/x", nil, ""); !isDialError(err) {
			t.Fatalf("err = %v, want a dial error", err)
		}
	})
}

// waitHeld waits until a frozen server holds a request to path: a request
// sent before would find the server dead first, and the poll would go to the
// next server without ever having to leave the frozen one.
func waitHeld(t *testing.T, held <-chan string, path string) {
	t.Helper()
	for {
		select {
		case p := <-held:
			if p == path {
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s never reached the frozen server", path)
		}
	}
}

// pollAFrozenServer starts server A, which holds every request that answer
// does not answer (a frozen server), and server B, which answers 204; then
// a client of both whose long-poll A holds. polled gets the poll's answer.
func pollAFrozenServer(t *testing.T, answer func(w http.ResponseWriter, r *http.Request) bool) (a, b *httptest.Server, c *Client, polled <-chan *http.Response) {
	t.Helper()
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	held := make(chan string, 8) // the paths of the requests A holds
	a, b, fp := twoServers(t,
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if answer(w, r) {
				return
			}
			select {
			case held <- r.URL.Path:
			default: // the test no longer looks
			}
			select {
			case <-hold:
			case <-r.Context().Done():
			}
		}),
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	c, err := New(a.URL+","+b.URL, pki.NewToken(pki.KindHost, fp).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	answered := make(chan *http.Response, 1)
	go func() {
		resp, err := c.Send(t.Context(), http.MethodGet, "/poll", nil, "")
		if err != nil {
			t.Error(err)
		}
		answered <- resp
	}()
	waitHeld(t, held, "/poll")
	return a, b, c, answered
}

// wantPollAnsweredByB waits for the held poll's answer: B's 204, once the
// client has left A.
func wantPollAnsweredByB(t *testing.T, polled <-chan *http.Response) {
	t.Helper()
	select {
	case resp := <-polled:
		if resp == nil {
			t.Fatal("the poll got no answer, want B's 204")
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("the poll's answer: %s from %v, want B's 204", resp.Status, resp.Request.URL)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the poll held by server A did not move on")
	}
}

// A long-poll held by a server that stops answering without closing its
// connection ends when another request finds the server dead, and goes on
// to the next server at once.
func TestALongPollLeavesAServerFoundDead(t *testing.T) {
	_, _, c, polled := pollAFrozenServer(t, func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodPost {
			return false
		}
		w.WriteHeader(http.StatusBadGateway) // as a proxy in front of a dead server says
		return true
	})
	resp, err := c.Send(t.Context(), http.MethodPost, "/status", bytes.NewReader(nil), "")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	wantPollAnsweredByB(t, polled)
}

// A server that takes connections but answers nothing (stopped, say) is
// found dead by the first request whose deadline passes: the long-poll it
// holds moves to the next server at once.
func TestAServerThatTimesOutIsLeftForTheNext(t *testing.T) {
	a, b, c, polled := pollAFrozenServer(t, func(http.ResponseWriter, *http.Request) bool { return false })
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, err := c.Send(ctx, http.MethodPost, "/status", bytes.NewReader(nil), ""); err == nil {
		t.Fatal("a report to the frozen server went through")
	}
	wantPollAnsweredByB(t, polled)
	if c.Server() != b.URL {
		t.Fatalf("the client talks to %s, want B", c.Server())
	}
	// A was passed over once, not twice: it is back after 1 s.
	c.mu.Lock()
	failures := c.rot.down[a.URL].failures
	c.mu.Unlock()
	if failures != 1 {
		t.Fatalf("A counted %d failures, want 1", failures)
	}
}
