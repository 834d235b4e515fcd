package cli

import (
	"strings"
	"testing"
	"time"
)

func TestEventFilterKeepsTheProjectOrNamespaceAndEveryHostEvent(t *testing.T) {
	events := []event{
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
	printEvent(&b, event{Time: at, Type: "rollout.done", Project: "default/demo", Resource: "egg/web", Message: "web on h1: 3/3"})
	printEvent(&b, event{Time: at, Type: "host.down", Host: "h1", Message: "host h1 is down"})
	want := "2026-03-01 12:00:00  rollout.done         default/demo egg/web  web on h1: 3/3\n" +
		"2026-03-01 12:00:00  host.down            host h1  host h1 is down\n"
	if b.String() != want {
		t.Fatalf("events:\n%s\nwant:\n%s", b.String(), want)
	}
}
