package deploy

import (
	"testing"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/provider"
	"github.com/hatchery/hatchery/internal/store"
)

func TestChangeSummaryNamesTheChangesByKeyAndCountsTheRest(t *testing.T) {
	ch := func(action, key string, changed ...string) api.Change {
		return api.Change{Action: action, Key: key, Changed: changed}
	}
	for _, c := range []struct {
		name    string
		destroy bool
		changes []api.Change
		want    string
	}{
		{"nothing", false, []api.Change{ch("=", "egg/web")}, "no changes"},
		{"by key, unchanged left out", false, []api.Change{ch("~", "secret/k", "value"), ch("=", "egg/db"), ch("~", "egg/web", "env", "source")},
			"~ egg/web [env, source], ~ secret/k [value]"},
		{"the first four", false, []api.Change{ch("+", "egg/a"), ch("+", "egg/b"), ch("+", "egg/c"), ch("+", "egg/d"), ch("+", "egg/e"), ch("-", "egg/f")},
			"+ egg/a, + egg/b, + egg/c, + egg/d and 2 more"},
		{"a destroy", true, []api.Change{ch("-", "network/default"), ch("-", "egg/web")}, "destroy: - egg/web, - network/default"},
	} {
		if got := changeSummary(c.destroy, c.changes); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestSpecDigestIgnoresOrderAndSecretValues(t *testing.T) {
	web := api.DesiredResource{Type: "egg", Name: "web", Inputs: map[string]any{"image": "web:1"}, Source: "sha256:aa"}
	key := func(fp string) api.DesiredResource {
		return api.DesiredResource{Type: "secret", Name: "k", Inputs: map[string]any{"env": "K", provider.FingerprintInput: fp}}
	}
	dep := []api.Dependency{{Parent: "secret/k", Child: "egg/web"}}
	a := specDigest(planInputs{Resources: []api.DesiredResource{web, key("one")}, Dependencies: dep})
	b := specDigest(planInputs{Resources: []api.DesiredResource{key("two"), web}, Dependencies: dep})
	if a != b || len(a) != len("sha256:")+64 {
		t.Fatalf("digests %q and %q: want one, whatever the order and the secret's value", a, b)
	}
	other := web
	other.Source = "sha256:bb"
	if specDigest(planInputs{Resources: []api.DesiredResource{other, key("one")}, Dependencies: dep}) == a {
		t.Fatal("another build source gave the same digest")
	}
	if specDigest(planInputs{Resources: []api.DesiredResource{web, key("one")}}) == a {
		t.Fatal("other dependencies gave the same digest")
	}
}

func TestRollbackTargetIsTheLastSuccessBeforeTheNewestOrTheOneNamed(t *testing.T) {
	rec := func(id int64, o store.ApplyOutcome) store.Apply {
		return store.Apply{ID: id, Outcome: o, HasInputs: true}
	}
	applies := []store.Apply{rec(9, store.ApplyFailed), rec(8, store.ApplyFailed), rec(7, store.ApplySucceeded), rec(6, store.ApplySucceeded)}
	if got, err := rollbackTarget("default/shop", applies, 0, 20); err != nil || got.ID != 7 {
		t.Fatalf("default target %d, %v; want 7", got.ID, err)
	}
	if got, err := rollbackTarget("default/shop", applies, 8, 20); err != nil || got.ID != 8 {
		t.Fatalf("--to 8: %d, %v", got.ID, err)
	}
	for _, c := range []struct {
		applies []store.Apply
		to      int64
		code    api.Code
	}{
		{nil, 0, api.CodeNotFound},
		{applies, 5, api.CodeGone},
		{applies, 10, api.CodeNotFound},
		{applies[:2], 0, api.CodeNotFound},
		{[]store.Apply{rec(2, store.ApplyRunning), rec(1, store.ApplySucceeded)}, 2, api.CodeConflict},
		{[]store.Apply{rec(2, store.ApplySucceeded), {ID: 1, Outcome: store.ApplySucceeded}}, 0, api.CodeGone},
		{[]store.Apply{rec(2, store.ApplySucceeded), {ID: 1, Outcome: store.ApplySucceeded, Summary: "destroy: - egg/web"}}, 0, api.CodeBadRequest},
	} {
		_, err := rollbackTarget("default/shop", c.applies, c.to, 20)
		if e, ok := err.(*api.Error); !ok || e.Code != c.code {
			t.Errorf("rollbackTarget(%+v, %d) = %v, want %s", c.applies, c.to, err, c.code)
		}
	}
}
