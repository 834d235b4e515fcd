package provider

import (
	"reflect"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/reconciler"
)

// A change of a volume's backup policy plans an update of the volume, keeps
// it on its host, and leaves every egg unchanged: nothing rolls for it.
func TestABackupPolicyChangeUpdatesTheVolumeInPlaceAndRollsNoEgg(t *testing.T) {
	withBackup := func(policy string) string {
		return strings.Replace(statefulYAML, "  pgdata: {}\n", "  pgdata:\n    backup: "+policy+"\n", 1)
	}
	e := newEnv(t, "h1")
	e.apply("default/data", withBackup("{schedule: {every: 6h}, keep: 7}"), nil)
	next := withBackup(`{schedule: {cron: "0 3 * * *"}, keep: 30, consistency: stop}`)

	plan, err := e.reconciler(Options{}).Plan(t.Context(), "default/data", e.project("default/data", next, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range plan.Changes {
		switch c.Key {
		case "volume/pgdata":
			if c.Action != reconciler.ActionUpdate || !reflect.DeepEqual(c.Changed, []string{"backup"}) {
				t.Errorf("volume/pgdata: %s %v, want an update of backup", c.Action, c.Changed)
			}
		default:
			if c.Action != reconciler.ActionUnchanged {
				t.Errorf("%s: %s %v, want unchanged (a backup policy rolls no egg)", c.Key, c.Action, c.Changed)
			}
		}
	}
	hs, err := e.preview("default/data", next, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if steps := stepsOf(hs); len(steps["h1"]) != 0 {
		t.Errorf("h1 would do %q, want nothing", steps["h1"])
	}
	res := e.apply("default/data", next, nil)
	for _, c := range res.Resources {
		if c.Key == "volume/pgdata" && c.Action != reconciler.ActionUpdate || c.Key != "volume/pgdata" && c.Action != reconciler.ActionUnchanged {
			t.Errorf("apply: %s %s, want only the volume updated", c.Key, c.Action)
		}
	}
}
