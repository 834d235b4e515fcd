package sessionhost

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/contract"
)

// fakeServers is a control plane of several servers, each with its own
// queue of offers; it records on which server each stream was opened.
type fakeServers struct {
	mu     sync.Mutex
	list   []string
	queued map[string][]contract.SessionOffer
	polled map[string]int
	opened map[string]string // session ID → the server its stream was opened on
}

func (f *fakeServers) SessionServers() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.list)
}

func (f *fakeServers) At(server string) (Offers, error) { return fakeOffers{f, server}, nil }

func (f *fakeServers) offer(server, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queued[server] = append(f.queued[server], contract.SessionOffer{ID: id, Kind: contract.SessionLogs})
}

type fakeOffers struct {
	f      *fakeServers
	server string
}

func (o fakeOffers) SessionOffers(ctx context.Context, _ time.Duration) ([]contract.SessionOffer, error) {
	o.f.mu.Lock()
	o.f.polled[o.server]++
	out := o.f.queued[o.server]
	delete(o.f.queued, o.server)
	o.f.mu.Unlock()
	if len(out) > 0 {
		return out, nil
	}
	select { // a short long-poll
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(10 * time.Millisecond):
		return nil, nil
	}
}

func (o fakeOffers) OpenSession(_ context.Context, id string) (*websocket.Conn, error) {
	o.f.mu.Lock()
	defer o.f.mu.Unlock()
	o.f.opened[id] = o.server
	return nil, errors.New("no stream in this test")
}

func (f *fakeServers) openedOn(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opened[id]
}

func (f *fakeServers) polls(server string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.polled[server]
}

// Each server offers its own operators' sessions: the runner polls every
// server listed, opens each stream on the server that offered it, and
// stops polling a server that left the list.
func TestTheRunnerPollsEveryServerAndOpensEachStreamWhereItWasOffered(t *testing.T) {
	f := &fakeServers{list: []string{"https://a", "https://b"}, queued: map[string][]contract.SessionOffer{},
		polled: map[string]int{}, opened: map[string]string{}}
	r, err := New(Config{HostID: "h1", Servers: f, Docker: noDocker{}, Kill: KillProcess, Logger: zaptest.NewLogger(t),
		Wait: time.Second, Recheck: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r.Start()
	defer r.Close(context.Background())

	f.offer("https://b", "s-b")
	f.offer("https://a", "s-a")
	eventually(t, func() bool { return f.openedOn("s-a") != "" && f.openedOn("s-b") != "" })
	if a, b := f.openedOn("s-a"), f.openedOn("s-b"); a != "https://a" || b != "https://b" {
		t.Fatalf("streams opened on %q and %q, want each on the server that offered it", a, b)
	}

	// b leaves the list: it is polled no more; c joins and is.
	f.mu.Lock()
	f.list = []string{"https://a", "https://c"}
	f.mu.Unlock()
	eventually(t, func() bool { return f.polls("https://c") > 0 })
	time.Sleep(50 * time.Millisecond) // b's last poll ends
	before := f.polls("https://b")
	time.Sleep(100 * time.Millisecond)
	if n := f.polls("https://b") - before; n != 0 {
		t.Errorf("b was polled %d times after it left the list", n)
	}
	f.offer("https://c", "s-c")
	eventually(t, func() bool { return f.openedOn("s-c") == "https://c" })
}

// noDocker is never called: no stream opens in these tests.
type noDocker struct{ Docker }

func eventually(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatal("not within 10 s")
}
