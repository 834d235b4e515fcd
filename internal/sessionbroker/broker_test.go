package sessionbroker

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hatchery/hatchery/internal/contract"
)

// pair returns the two ends of one WebSocket: the server's (what the
// broker relays) and the client's (the operator or the agent).
func pair(t testing.TB) (server, client *websocket.Conn) {
	t.Helper()
	got := make(chan *websocket.Conn, 1)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		got <- c
		<-r.Context().Done()
	}))
	t.Cleanup(hs.Close)
	client, _, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(hs.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.CloseNow() })
	return <-got, client
}

func broker(t *testing.T, cfg Config) *Broker {
	t.Helper()
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSessionsAreLimitedPerHostAndPerAdmin(t *testing.T) {
	cfg := DefaultConfig()
	cfg.PerHost, cfg.PerActor = 2, 3
	b := broker(t, cfg)
	open := func(host, actor string) (*Session, error) {
		return b.Open(host, actor, contract.SessionOffer{Kind: contract.SessionLogs})
	}
	h1a, _ := open("h1", "alice")
	if _, err := open("h1", "bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := open("h1", "carol"); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "host h1") {
		t.Fatalf("a third session on h1: %v, want the host's limit", err)
	}
	open("h2", "alice")
	open("h3", "alice")
	if _, err := open("h4", "alice"); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), `"alice"`) {
		t.Fatalf("alice's fourth session: %v, want her limit", err)
	}
	h1a.Close()
	h1a.Close() // idempotent: releases once
	if _, err := open("h1", "carol"); err != nil {
		t.Fatalf("after a close, h1 has room: %v", err)
	}
	if _, err := open("h1", "dave"); !errors.Is(err, ErrLimit) {
		t.Fatalf("a double close released two slots: %v", err)
	}
}

func TestOffersAreHandedOnceToTheirHostAndWakeItsPoll(t *testing.T) {
	b := broker(t, DefaultConfig())
	none, wake := b.Offers("h1")
	if len(none) != 0 {
		t.Fatalf("offers before any session: %+v", none)
	}
	s, err := b.Open("h1", "alice", contract.SessionOffer{Kind: contract.SessionExec})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(time.Second):
		t.Fatal("a new session did not wake the host's poll")
	}
	if other, _ := b.Offers("h2"); len(other) != 0 {
		t.Fatalf("h2 was offered h1's session: %+v", other)
	}
	got, _ := b.Offers("h1")
	if len(got) != 1 || got[0].ID != s.Offer.ID || got[0].Actor != "alice" {
		t.Fatalf("h1's offers %+v", got)
	}
	if again, _ := b.Offers("h1"); len(again) != 0 {
		t.Fatalf("offered twice: %+v", again)
	}
	if _, err := b.Claim("h2", s.Offer.ID); !errors.Is(err, ErrUnknown) {
		t.Fatalf("h2 claimed h1's session: %v", err)
	}
	if _, err := b.Claim("h1", s.Offer.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Claim("h1", s.Offer.ID); !errors.Is(err, ErrUnknown) {
		t.Fatalf("claimed twice: %v", err)
	}
	s.Close()
	if b.Count() != 0 {
		t.Fatalf("%d sessions open after the close", b.Count())
	}
}

func TestAnIdleSessionIsClosedOnBothSides(t *testing.T) {
	cfg := DefaultConfig()
	cfg.IdleTimeout = 300 * time.Millisecond
	b := broker(t, cfg)
	opServer, op := pair(t)
	agServer, ag := pair(t)
	done := make(chan struct{})
	go func() { b.Pump(t.Context(), opServer, agServer); close(done) }()
	// Traffic keeps it open past the timeout...
	for range 4 {
		if err := op.Write(t.Context(), websocket.MessageBinary, []byte("k")); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ag.Read(t.Context()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(150 * time.Millisecond)
	}
	// ...silence closes it, each side told why.
	start := time.Now()
	for _, c := range []*websocket.Conn{op, ag} {
		_, _, err := c.Read(t.Context())
		if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
			t.Fatalf("read after silence: %v, want a policy close", err)
		}
	}
	if waited := time.Since(start); waited > 2*time.Second {
		t.Fatalf("closed %v after the silence began, want about the idle timeout", waited)
	}
	<-done
}

func TestARelayHoldsEachDirectionToItsBytesPerSecond(t *testing.T) {
	cfg := DefaultConfig()
	cfg.BytesPerSecond = 64 << 10 // the burst is one message: MaxMessage
	b := broker(t, cfg)
	opServer, op := pair(t)
	agServer, ag := pair(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go b.Pump(ctx, opServer, agServer)
	chunk := make([]byte, 32<<10)
	const total = 8 // 256 KiB: the first 64 KiB at once, the rest at 64 KiB/s: about 3 s
	go func() {
		for range total {
			if ag.Write(ctx, websocket.MessageBinary, chunk) != nil {
				return
			}
		}
	}()
	start := time.Now()
	for range total {
		if _, _, err := op.Read(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took < 2500*time.Millisecond {
		t.Fatalf("256 KiB crossed in %v at 64 KiB/s: the limit was not applied", took)
	}
}
