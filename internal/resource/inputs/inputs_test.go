package inputs

import (
	"maps"
	"strings"
	"testing"
)

func TestEnvValuesBecomeStrings(t *testing.T) {
	in, err := Decode[Egg](map[string]any{
		"env": map[string]any{"URL": "http://api:80", "API_HOSTS": []any{"h1", "h2"}, "N": 3},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Env{"URL": "http://api:80", "API_HOSTS": "h1,h2", "N": "3"}
	if !maps.Equal(in.Env, want) {
		t.Fatalf("env %v, want %v", in.Env, want)
	}
}

// A field the type does not declare is refused, at any depth, so inputs
// written by a newer or older writer fail loudly instead of being half read.
func TestDecodeIsStrict(t *testing.T) {
	for name, in := range map[string]map[string]any{
		"top level": {"image": "x", "imagee": "y"},
		"nested":    {"rollout": map[string]any{"order": "start-first", "surge": 1}},
		"in a list": {"ports": []any{map[string]any{"published": 80, "target": 80, "proto": "tcp"}}},
	} {
		if _, err := Decode[Egg](in); err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("%s: err %v, want an unknown field", name, err)
		}
	}
	if _, err := Decode[Route](map[string]any{"hosts": "${egg/web.hosts}"}); err == nil {
		t.Error("a route's hosts as a string decoded: the list shape is the contract")
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	want := Egg{Image: "web:1", Replicas: 2, Env: Env{"A": "1"}, Rollout: Rollout{MaxSurge: Surge{Percent: 25}},
		Placement: Placement{Beside: []Beside{{Egg: "db", Hosts: []string{"h1"}}}}}
	got, err := Decode[Egg](Encode(want))
	if err != nil {
		t.Fatal(err)
	}
	if got.Image != want.Image || got.Replicas != 2 || got.Env["A"] != "1" || got.Rollout.MaxSurge != want.Rollout.MaxSurge ||
		len(got.Placement.Beside) != 1 || got.Placement.Beside[0].Hosts[0] != "h1" {
		t.Fatalf("round trip: %+v", got)
	}
}

func TestSurgeSlots(t *testing.T) {
	for _, c := range []struct {
		s    Surge
		n    int
		want int
	}{
		{Surge{Percent: 25}, 8, 2}, {Surge{Percent: 25}, 3, 1}, {Surge{Percent: 25}, 0, 1},
		{Surge{Percent: 100}, 5, 5}, {Surge{Count: 2}, 10, 2},
		{Surge{}, 4, 0}, // unset: the agent's default decides
	} {
		if got := c.s.Slots(c.n); got != c.want {
			t.Errorf("%+v.Slots(%d) = %d, want %d", c.s, c.n, got, c.want)
		}
	}
}
