package sessionbroker

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hatchery/hatchery/internal/contract"
)

// fixedSource is a LogSource whose targets never change.
type fixedSource map[string][]string

func (s fixedSource) Targets(context.Context) (map[string][]string, error) { return s, nil }
func (s fixedSource) Changed(ctx context.Context) <-chan struct{}          { return ctx.Done() }

func TestALogsRequestIsOneSessionOfItsAdminAndAFullHostIsSaidUnavailable(t *testing.T) {
	cfg := DefaultConfig()
	cfg.PerHost, cfg.PerActor = 1, 1
	b := broker(t, cfg)
	busy, err := b.Open("h2", "bob", contract.SessionOffer{Kind: contract.SessionExec})
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	logs, err := b.OpenLogs("alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.OpenLogs("alice"); !errors.Is(err, ErrLimit) {
		t.Fatalf("a second logs request of an admin allowed one: %v", err)
	}
	if _, err := b.Open("h3", "alice", contract.SessionOffer{Kind: contract.SessionExec}); !errors.Is(err, ErrLimit) {
		t.Fatalf("an exec beside a logs request of an admin allowed one: %v", err)
	}

	opServer, op := pair(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req := contract.LogsRequest{Project: "default/shop", Slot: -1, Tail: -1}
	served := make(chan struct{})
	go func() {
		defer close(served)
		logs.Serve(ctx, opServer, req, fixedSource{"h1": {"web"}, "h2": {"web"}}, fixedSource{})
	}()
	agent := answerLogs(ctx, t, b, "h1")
	rec, _ := json.Marshal(contract.LogRecord{Host: "h9", Egg: "web", Line: "hello"})
	if err := agent.Write(ctx, websocket.MessageText, rec); err != nil {
		t.Fatal(err)
	}
	_ = agent.Close(websocket.StatusNormalClosure, "")

	var got []contract.LogRecord
	for {
		r, ok := readRecord(ctx, t, op)
		if !ok {
			break
		}
		got = append(got, r)
	}
	<-served
	if len(got) != 2 {
		t.Fatalf("records %+v, want h2 unavailable and h1's line", got)
	}
	for _, r := range got {
		switch r.Host {
		case "h1":
			if r.Line != "hello" {
				t.Errorf("h1's record %+v", r)
			}
		case "h2":
			if r.Event != EventUnavailable || !strings.Contains(r.Line, "host h2 serves 1 sessions") {
				t.Errorf("h2's record %+v, want unavailable at its limit", r)
			}
		default:
			t.Errorf("a record of host %q: %+v", r.Host, r)
		}
	}
	logs.Close()
	logs.Close() // idempotent
	again, err := b.OpenLogs("alice")
	if err != nil {
		t.Fatalf("alice's session after the request ended: %v", err)
	}
	if _, err := b.OpenLogs("alice"); !errors.Is(err, ErrLimit) {
		t.Fatalf("a second request beside alice's new one: %v, want her limit of 1", err)
	}
	again.Close()
	if n := b.Count(); n != 1 {
		t.Fatalf("%d sessions open, want bob's only", n)
	}
}

// laterSource has no targets until placed is closed (a run not in any
// host's desired state yet), then one.
type laterSource struct {
	placed  chan struct{}
	targets map[string][]string
}

func (s laterSource) Targets(context.Context) (map[string][]string, error) {
	select {
	case <-s.placed:
		return s.targets, nil
	default:
		return nil, nil
	}
}

func (s laterSource) Changed(ctx context.Context) <-chan struct{} {
	out := make(chan struct{})
	go func() {
		defer close(out)
		select {
		case <-s.placed:
		case <-ctx.Done():
		}
	}()
	return out
}

func TestFollowingARunWaitsForItsHostAndEndsWithItsOutput(t *testing.T) {
	b := broker(t, DefaultConfig())
	logs, err := b.OpenLogs("alice")
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	opServer, op := pair(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	src := laterSource{placed: make(chan struct{}), targets: map[string][]string{"h1": {"migrate"}}}
	req := contract.LogsRequest{Project: "default/shop", Egg: "migrate", Slot: -1, Tail: -1, Follow: true, Run: "r1"}
	served := make(chan struct{})
	go func() {
		defer close(served)
		logs.Serve(ctx, opServer, req, map[string][]string{}, src)
	}()
	close(src.placed) // the run reaches h1's desired state
	agent := answerLogs(ctx, t, b, "h1")
	rec, _ := json.Marshal(contract.LogRecord{Egg: "migrate", Line: "migrated"})
	if err := agent.Write(ctx, websocket.MessageText, rec); err != nil {
		t.Fatal(err)
	}
	_ = agent.Close(websocket.StatusNormalClosure, "") // the run's container ended
	got, ok := readRecord(ctx, t, op)
	if !ok || got.Line != "migrated" || got.Host != "h1" {
		t.Fatalf("record %+v (%v), want h1's line", got, ok)
	}
	if _, ok := readRecord(ctx, t, op); ok {
		t.Fatal("a second record, want the stream's normal end")
	}
	select {
	case <-served:
	case <-ctx.Done():
		t.Fatal("the run's session did not end with its host's stream")
	}
}
