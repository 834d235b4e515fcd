package sessionbroker

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hatchery/hatchery/internal/contract"
)

// answerLogs is host's agent taking the next logs session offered to it:
// the returned connection is its end of the session's stream.
func answerLogs(ctx context.Context, t *testing.T, b *Broker, host string) *websocket.Conn {
	t.Helper()
	var offers []contract.SessionOffer
	for len(offers) == 0 {
		var more <-chan struct{}
		offers, more = b.Offers(host)
		if len(offers) == 0 {
			select {
			case <-more:
			case <-ctx.Done():
				t.Fatalf("%s was never offered the logs", host)
			}
		}
	}
	sess, err := b.Claim(host, offers[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	agentServer, agent := pair(t)
	sess.Attach(agentServer)
	return agent
}

// readRecord reads the operator's next record; ok is false once the stream
// ended normally.
func readRecord(ctx context.Context, t *testing.T, op *websocket.Conn) (rec contract.LogRecord, ok bool) {
	t.Helper()
	_, data, err := op.Read(ctx)
	if err != nil {
		if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
			t.Fatalf("the operator's stream ended with %v", err)
		}
		return rec, false
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	return rec, true
}

// A host whose agent never opens its stream delays nobody, even a host
// asked after it (h1 is asked first): the other host's lines come at once,
// and the silent host is said unavailable when its pairing times out, after
// which the request ends.
func TestALogsRequestReadsTheOtherHostsWhileOneNeverAnswers(t *testing.T) {
	cfg := DefaultConfig()
	cfg.PairTimeout = 2 * time.Second
	b := broker(t, cfg)
	logs, err := b.OpenLogs("alice")
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	opServer, op := pair(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	served := make(chan struct{})
	go func() {
		defer close(served)
		logs.Serve(ctx, opServer, contract.LogsRequest{Project: "default/shop", Slot: -1, Tail: -1},
			fixedSource{"h2": {"web"}, "h1": {"web"}}, fixedSource{})
	}()
	agent := answerLogs(ctx, t, b, "h2")
	line, _ := json.Marshal(contract.LogRecord{Egg: "web", Line: "hello"})
	if err := agent.Write(ctx, websocket.MessageText, line); err != nil {
		t.Fatal(err)
	}
	if rec, ok := readRecord(ctx, t, op); !ok || rec.Host != "h2" || rec.Line != "hello" {
		t.Fatalf("first record %+v, want h2's line before h1's pairing times out", rec)
	}
	_ = agent.Close(websocket.StatusNormalClosure, "")
	rec, ok := readRecord(ctx, t, op)
	if !ok || rec.Host != "h1" || rec.Event != EventUnavailable || !strings.Contains(rec.Line, "did not open the session's stream") {
		t.Fatalf("second record %+v, want h1 unavailable: its agent never answered", rec)
	}
	if rec, ok := readRecord(ctx, t, op); ok {
		t.Fatalf("a record %+v after every host was read, want the stream closed", rec)
	}
	<-served
	if n := b.Count(); n != 0 {
		t.Fatalf("%d sessions open after the request, want none", n)
	}
}
