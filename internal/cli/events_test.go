package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/client"
)

func TestEventFilterKeepsTheProjectOrNamespaceAndEveryHostEvent(t *testing.T) {
	events := []api.Event{
		{Type: "host.down", Host: "h1"},
		{Type: "apply.started", Project: "default/demo"},
		{Type: "apply.started", Project: "staging/demo"},
		{Type: "apply.started", Project: "default/shop"},
	}
	tests := []struct {
		name   string
		filter eventFilter
		want   []int
	}{
		{"everything", eventFilter{}, []int{0, 1, 2, 3}},
		{"one project", eventFilter{project: "default/demo"}, []int{0, 1}},
		{"one namespace", eventFilter{namespace: "default"}, []int{0, 1, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []int
			for i, e := range events {
				if tt.filter.keep(e) {
					got = append(got, i)
				}
			}
			if len(got) != len(tt.want) {
				t.Fatalf("kept %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("kept %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestPrintEventNamesWhatItIsAbout(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.Local)
	var b strings.Builder
	printEvent(&b, api.Event{Time: at, Type: "rollout.done", Project: "default/demo", Resource: "egg/web", Message: "web on h1: 3/3"})
	printEvent(&b, api.Event{Time: at, Type: "host.down", Host: "h1", Message: "host h1 is down"})
	want := "2026-03-01 12:00:00  rollout.done         default/demo egg/web  web on h1: 3/3\n" +
		"2026-03-01 12:00:00  host.down            host h1  host h1 is down\n"
	if b.String() != want {
		t.Fatalf("events:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestFollowEventsTakesUpACutStreamAfterTheLastEvent(t *testing.T) {
	var (
		mu     sync.Mutex
		asked  []string
		second = make(chan struct{})
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.Query().Get("since"))
		n := len(asked)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		if n == 1 {
			fmt.Fprintf(w, "id: 1\nevent: host.up\ndata: {\"seq\":1,\"type\":\"host.up\",\"host\":\"h1\",\"message\":\"first\"}\n\n")
			return // the server goes away mid-stream
		}
		fmt.Fprintf(w, "id: 2\nevent: host.down\ndata: {\"seq\":2,\"type\":\"host.down\",\"host\":\"h1\",\"message\":\"second\"}\n\n")
		w.(http.Flusher).Flush()
		close(second)
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	c, err := client.New(client.Config{Server: srv.URL, Token: adminToken()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut safeBuffer
	done := make(chan error, 1)
	go func() { done <- followEvents(ctx, c, eventFilter{}, &out, &errOut) }()
	select {
	case <-second:
	case <-time.After(10 * time.Second):
		t.Fatal("no reconnection")
	}
	waitUntil(t, func() bool { return strings.Contains(out.String(), "second") })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("followEvents = %v after Ctrl-C, want nil", err)
	}
	if strings.Count(out.String(), "first") != 1 || !strings.Contains(errOut.String(), "lost the control plane") {
		t.Fatalf("stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 2 || asked[0] != "0" || asked[1] != "1" {
		t.Fatalf("asked since %v, want 0 then 1", asked)
	}
}

// safeBuffer is a strings.Builder safe for a writer and a reader.
type safeBuffer struct {
	mu sync.Mutex // guards b
	b  strings.Builder
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
