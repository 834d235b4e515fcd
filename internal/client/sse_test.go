package client

import (
	"errors"
	"strings"
	"testing"
)

func TestReadSSEDispatchesEventsAndSkipsComments(t *testing.T) {
	stream := ": keep-alive\n\n" +
		"id: 1\nevent: progress\ndata: {\"a\":1}\n\n" +
		"data: first\ndata: second\nretry: 10\n\n" +
		"id: 3\n" // cut short: no blank line, no event
	var got []sseEvent
	err := readSSE(strings.NewReader(stream), func(e sseEvent) error {
		got = append(got, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []sseEvent{{ID: "1", Type: "progress", Data: `{"a":1}`}, {Type: "message", Data: "first\nsecond"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("events = %+v, want %+v", got, want)
	}
}

func TestReadSSEStopsAtTheCallbacksError(t *testing.T) {
	stop := errors.New("stop")
	calls := 0
	err := readSSE(strings.NewReader("data: 1\n\ndata: 2\n\n"), func(sseEvent) error {
		calls++
		return stop
	})
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("readSSE = %v after %d calls, want stop after 1", err, calls)
	}
}
