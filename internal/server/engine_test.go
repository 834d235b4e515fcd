package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/fleet"
	"github.com/hatchery/hatchery/internal/store"
)

// A host whose agent reports its Docker Engine unresponsive shows so in
// the host list, and the change each way is an event.
func TestAnUnresponsiveEngineShowsInTheHostsAndItsChangesAreEvents(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	post := func(engine *contract.EngineProblem) {
		t.Helper()
		b, _ := json.Marshal(contract.StatusReport{HostID: "h1", Time: time.Now(), Engine: engine})
		if resp := h.do("POST", "/api/v1/hosts/h1/status", strings.NewReader(string(b))); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("POST status: %d", resp.StatusCode)
		}
	}
	engineOf := func() *contract.EngineProblem {
		t.Helper()
		hosts := decode[api.HostList](t, h.do("GET", "/api/v1/hosts", nil), 200)
		if len(hosts.Hosts) != 1 {
			t.Fatalf("hosts = %+v", hosts.Hosts)
		}
		return hosts.Hosts[0].Engine
	}
	events := func() []api.Event {
		t.Helper()
		var out []api.Event
		for _, e := range decode[api.EventList](t, h.do("GET", "/api/v1/events", nil), 200).Events {
			if e.Type == string(fleet.EventEngineUnresponsive) || e.Type == string(fleet.EventEngineAnswers) {
				out = append(out, e)
			}
		}
		return out
	}

	post(nil)
	since := time.Now().Add(-3 * time.Second).UTC().Truncate(time.Second)
	frozen := &contract.EngineProblem{Since: since, Reason: "ping the Docker Engine: context deadline exceeded"}
	post(frozen)
	post(frozen) // a second report of the same problem is no new event
	if got := engineOf(); got == nil || !got.Since.Equal(since) || got.Reason != frozen.Reason {
		t.Fatalf("the host's engine = %+v, want %+v", got, frozen)
	}
	if evs := events(); len(evs) != 1 || evs[0].Type != string(fleet.EventEngineUnresponsive) || evs[0].Host != "h1" ||
		!strings.Contains(evs[0].Message, "context deadline exceeded") {
		t.Fatalf("events %+v, want one host.engine_unresponsive of h1 with the reason", evs)
	}
	post(nil)
	if got := engineOf(); got != nil {
		t.Fatalf("the host's engine = %+v after it answered", got)
	}
	if evs := events(); len(evs) != 2 || evs[1].Type != string(fleet.EventEngineAnswers) {
		t.Fatalf("events %+v, want host.engine_answers after it", evs)
	}
}

// A report that tells of a fence is one host.fenced event, however many
// reports carry it; a later fence is another.
func TestAReportedFenceIsOneEvent(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	post := func(fencedAt time.Time) {
		t.Helper()
		b, _ := json.Marshal(contract.StatusReport{HostID: "h1", Time: time.Now(), FencedAt: fencedAt})
		if resp := h.do("POST", "/api/v1/hosts/h1/status", strings.NewReader(string(b))); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("POST status: %d", resp.StatusCode)
		}
	}
	fenced := func() []api.Event {
		t.Helper()
		var out []api.Event
		for _, e := range decode[api.EventList](t, h.do("GET", "/api/v1/events", nil), 200).Events {
			if e.Type == string(store.EventHostFenced) {
				out = append(out, e)
			}
		}
		return out
	}
	at := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	post(time.Time{})
	post(at)
	post(at) // its answer was lost: sent again
	post(time.Time{})
	if evs := fenced(); len(evs) != 1 || evs[0].Host != "h1" || !strings.Contains(evs[0].Message, at.Format(time.RFC3339)) {
		t.Fatalf("host.fenced events %+v, want one of h1 at %s", evs, at)
	}
	post(at.Add(30 * time.Second))
	if evs := fenced(); len(evs) != 2 {
		t.Fatalf("host.fenced events %+v, want a second for a second fence", evs)
	}
}
