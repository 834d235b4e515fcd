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
