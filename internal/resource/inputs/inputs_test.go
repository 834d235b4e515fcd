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
		Uses: []string{"db"}}
	got, err := Decode[Egg](Encode(want))
	if err != nil {
		t.Fatal(err)
	}
	if got.Image != want.Image || got.Replicas != 2 || got.Env["A"] != "1" || got.Rollout.MaxSurge != want.Rollout.MaxSurge ||
		len(got.Uses) != 1 || got.Uses[0] != "db" {
		t.Fatalf("round trip: %+v", got)
	}
	if _, ok := Encode(want)["placement"].(map[string]any)["beside"]; ok {
		t.Fatal("placement.beside is written again: nothing reads it")
	}
}

// Records stored before eggs reached each other across hosts carry
// placement.beside (resolved) and no uses: they still decode, strictly.
func TestAnEggRecordStoredWithBesideDecodes(t *testing.T) {
	old := map[string]any{"image": "web:1", "replicas": 2, "placement": map[string]any{
		"hosts": []any{}, "volume": "", "volume_host": "",
		"beside": []any{map[string]any{"egg": "db", "hosts": []any{"h1", "h2"}}}}}
	got, err := Decode[Egg](old)
	if err != nil {
		t.Fatalf("old egg record: %v", err)
	}
	if got.Image != "web:1" || got.Uses != nil || len(got.Placement.Beside) != 1 {
		t.Fatalf("old egg record decoded as %+v", got)
	}
	if _, err := Decode[Volume](map[string]any{"egg": "app", "placement": old["placement"]}); err != nil {
		t.Fatalf("old volume record: %v", err)
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
