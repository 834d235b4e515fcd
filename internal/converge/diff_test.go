package converge

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

var (
	web  = wl("web", 2)
	web1 = wl("web", 1)
	db   = wl("db", 1, stateful)
)

type diffCase struct {
	name    string
	desired contract.DesiredState
	actual  []containers.Container
	history *History
	now     time.Time // t0 when zero
	want    []string
	fails   []string // "workload: reason" substrings
}

func runDiffCases(t *testing.T, cases []diffCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			now := tt.now
			if now.IsZero() {
				now = t0
			}
			before := slices.Clone(tt.actual)
			p := Diff(tt.desired, tt.actual, tt.history, now)
			equalSteps(t, p, tt.want)
			if len(p.Failures) != len(tt.fails) {
				t.Fatalf("failures %+v, want %q", p.Failures, tt.fails)
			}
			for i, f := range p.Failures {
				if !strings.Contains(f.WorkloadID+": "+f.Reason, tt.fails[i]) {
					t.Errorf("failure %+v, want %q", f, tt.fails[i])
				}
			}
			for i := range before {
				if before[i].State != tt.actual[i].State || before[i].ID != tt.actual[i].ID {
					t.Fatal("Diff modified its input")
				}
			}
		})
	}
}

// The seed's rules.
func TestDiffSeedRules(t *testing.T) {
	runDiffCases(t, []diffCase{
		{name: "empty host: start every slot",
			desired: desiredOf(web), want: []string{"start web/0", "start web/1"}},
		{name: "no up-to-date container: start one, the stale one keeps serving",
			desired: desiredOf(web1),
			actual:  []containers.Container{ctr("s0", web1, 0, old, contract.StateRunning)},
			want:    []string{"start web/0"}},
		{name: "up-to-date and healthy: roll the stale one",
			desired: desiredOf(web1),
			actual: []containers.Container{ctr("s0", web1, 0, old, contract.StateRunning),
				ctr("u0", web1, 0, up(web1), contract.StateRunning)},
			want: []string{"roll web/0 s0"}},
		{name: "up-to-date still booting: wait, nothing is stopped",
			desired: desiredOf(web1),
			actual: []containers.Container{ctr("s0", web1, 0, old, contract.StateRunning),
				ctr("u0", web1, 0, up(web1), contract.StateStarting)},
			want: nil},
		{name: "up-to-date running but never healthy yet: still booting",
			desired: desiredOf(web1),
			actual: []containers.Container{ctr("s0", web1, 0, old, contract.StateRunning),
				ctr("u0", web1, 0, up(web1), contract.StateRunning, unhealthy(5))},
			want: nil},
		{name: "up-to-date crashed: restart in place",
			desired: desiredOf(web1),
			actual:  []containers.Container{ctr("u0", web1, 0, up(web1), contract.StateCrashed)},
			want:    []string{"restart web/0 u0"}},
		{name: "slots at or above N are surplus: drained if serving, stopped if not",
			desired: desiredOf(web1),
			actual: []containers.Container{ctr("u0", web1, 0, up(web1), contract.StateRunning),
				ctr("u1", web1, 1, up(web1), contract.StateRunning),
				ctr("u2", web1, 2, up(web1), contract.StateCrashed)},
			want: []string{"drain web/1 u1", "stop web/2 u2"}},
		{name: "replicas 0: the egg goes cold",
			desired: desiredOf(wl("web", 0)),
			actual: []containers.Container{ctr("u0", web, 0, up(wl("web", 0)), contract.StateRunning),
				ctr("s1", web, 1, old, contract.StateRunning)},
			want: []string{"drain web/0 u0", "drain web/1 s1"}},
		{name: "a workload no longer desired: drained if serving, stopped if not",
			desired: desiredOf(web1),
			actual: []containers.Container{ctr("u0", web1, 0, up(web1), contract.StateRunning),
				ctr("a0", wl("api", 2), 0, old, contract.StateRunning),
				ctr("a1", wl("api", 2), 1, old, contract.StateStarting)},
			want: []string{"drain api/0 a0", "stop api/1 a1"}},
		{name: "steady state: nothing to do",
			desired: desiredOf(web),
			actual: []containers.Container{ctr("u0", web, 0, up(web), contract.StateRunning),
				ctr("u1", web, 1, up(web), contract.StateRunning)},
			want: nil},
	})
}

func TestDiffDuplicatesAndStalledRolls(t *testing.T) {
	runDiffCases(t, []diffCase{
		{name: "duplicates: keep a healthy one, drain the other healthy, stop the booting",
			desired: desiredOf(web1),
			actual: []containers.Container{ctr("u0", web1, 0, up(web1), contract.StateStarting),
				ctr("u1", web1, 0, up(web1), contract.StateRunning),
				ctr("u2", web1, 0, up(web1), contract.StateRunning, created(2*time.Minute))},
			want: []string{"drain web/0 u2", "stop web/0 u0"}},
		{name: "a stalled roll keeps one stale container, a healthy one",
			desired: desiredOf(web1),
			actual: []containers.Container{ctr("s0", web1, 0, old, contract.StateCrashed),
				ctr("s1", web1, 0, "other", contract.StateRunning),
				ctr("s2", web1, 0, "third", contract.StateRunning, created(2*time.Minute)),
				ctr("u0", web1, 0, up(web1), contract.StateStarting)},
			want: []string{"drain web/0 s2", "stop web/0 s0"}},
		{name: "the only stale container crashed: replaced at once, not surge-limited",
			desired: desiredOf(web1),
			actual:  []containers.Container{ctr("s0", web1, 0, old, contract.StateCrashed)},
			want:    []string{"stop web/0 s0", "start web/0"}},
	})
}

func TestDiffLabels(t *testing.T) {
	runDiffCases(t, []diffCase{
		{name: "unreadable slot: treated as stale in slot 0",
			desired: desiredOf(web1),
			actual: []containers.Container{ctr("x", web1, 0, up(web1), contract.StateRunning,
				labels(func(l map[string]string) { l[containers.LabelSlot] = "zero" }))},
			want: []string{"start web/0"}},
		{name: "unreadable slot beside a healthy up-to-date one: rolled",
			desired: desiredOf(web1),
			actual: []containers.Container{ctr("x", web1, 0, up(web1), contract.StateRunning,
				labels(func(l map[string]string) { delete(l, containers.LabelSlot) })),
				ctr("u0", web1, 0, up(web1), contract.StateRunning)},
			want: []string{"roll web/0 x"}},
		{name: "missing spec label: stale",
			desired: desiredOf(web1),
			actual: []containers.Container{ctr("x", web1, 0, up(web1), contract.StateRunning,
				labels(func(l map[string]string) { delete(l, containers.LabelSpec) }))},
			want: []string{"start web/0"}},
		{name: "missing workload label: an extra, drained",
			desired: desiredOf(web1),
			actual: []containers.Container{ctr("u0", web1, 0, up(web1), contract.StateRunning),
				ctr("x", web1, 0, up(web1), contract.StateRunning,
					labels(func(l map[string]string) { delete(l, containers.LabelWorkload) }))},
			want: []string{"drain /0 x"}},
	})
}

func TestDiffHostScope(t *testing.T) {
	foreign := []containers.Container{
		ctr("other-host", web1, 0, old, contract.StateCrashed,
			func(c *containers.Container) { c.Labels = containers.Labels("h2", web1, 0, old) }),
		ctr("unmanaged", web1, 0, old, contract.StateCrashed,
			func(c *containers.Container) { c.Labels = map[string]string{"app": "x"} }),
		ctr("no-labels", web1, 0, old, contract.StateRunning, func(c *containers.Container) { c.Labels = nil }),
		ctr("managed-false", web1, 0, old, contract.StateRunning, func(c *containers.Container) {
			c.Labels = containers.Labels(host, web1, 0, old)
			c.Labels[containers.LabelManaged] = "false"
		}),
	}
	runDiffCases(t, []diffCase{
		{name: "foreign containers are never in a plan",
			desired: desiredOf(web1),
			actual:  append(slices.Clone(foreign), ctr("u0", web1, 0, up(web1), contract.StateRunning)),
			want:    nil},
		{name: "even when nothing is desired",
			desired: desiredOf(), actual: foreign, want: nil},
		{name: "an empty host ID owns nothing",
			desired: contract.DesiredState{}, actual: []containers.Container{ctr("u0", web1, 0, old, contract.StateRunning)},
			want: nil},
	})
}

func TestDiffWorkInProgress(t *testing.T) {
	runDiffCases(t, []diffCase{
		{name: "a building slot is not started twice",
			desired: desiredOf(web1),
			actual:  []containers.Container{ctr("", web1, 0, up(web1), contract.StateBuilding)},
			want:    nil},
		{name: "a building replacement beside a stale container: wait",
			desired: desiredOf(web1),
			actual: []containers.Container{ctr("s0", web1, 0, old, contract.StateRunning),
				ctr("", web1, 0, up(web1), contract.StateBuilding)},
			want: nil},
		{name: "a draining container is not acted on, and does not fill its slot",
			desired: desiredOf(web1),
			actual:  []containers.Container{ctr("u0", web1, 0, up(web1), contract.StateDraining)},
			want:    []string{"start web/0"}},
		{name: "surplus being built or drained: left to finish",
			desired: desiredOf(wl("web", 0)),
			actual: []containers.Container{ctr("", web, 0, up(wl("web", 0)), contract.StateBuilding),
				ctr("d1", web, 1, old, contract.StateDraining)},
			want: nil},
		{name: "a placeholder that is not building is ignored",
			desired: desiredOf(web1),
			actual: []containers.Container{ctr("u0", web1, 0, up(web1), contract.StateRunning),
				ctr("", web1, 0, up(web1), contract.StateCrashed, func(c *containers.Container) { c.ID = "" })},
			want: nil},
	})
}

func TestDiffStaleBySpecHashPerWorkload(t *testing.T) {
	api := wl("api", 1)
	newWeb := wl("web", 1, func(w *contract.WorkloadSpec) { w.Env = map[string]string{"X": "2"} })
	running := []containers.Container{
		ctr("w0", web1, 0, up(web1), contract.StateRunning),
		ctr("a0", api, 0, up(api), contract.StateRunning),
	}
	runDiffCases(t, []diffCase{
		{name: "changing one workload rolls only that one",
			desired: desiredOf(newWeb, api), actual: running, want: []string{"start web/0"}},
		{name: "changing only the replica count rolls nothing",
			desired: desiredOf(wl("web", 2), api), actual: running, want: []string{"start web/1"}},
		{name: "changing only routes and rollout settings rolls nothing",
			desired: desiredOf(wl("web", 1, func(w *contract.WorkloadSpec) {
				w.Routes = []contract.Route{{Host: "x.localhost"}}
				w.Rollout.MaxSurge = 3
			}), api),
			actual: running, want: nil},
	})
}

func TestDiffSurgeLimit(t *testing.T) {
	w8 := wl("web", 8)
	var stale []containers.Container
	for i := range 8 {
		stale = append(stale, ctr("s"+strconv.Itoa(i), w8, i, old, contract.StateRunning))
	}
	withReplacement := append(slices.Clone(stale), ctr("u3", w8, 3, up(w8), contract.StateStarting))
	withReadyReplacement := append(slices.Clone(stale), ctr("u3", w8, 3, up(w8), contract.StateRunning))
	surge3 := wl("web", 8, func(w *contract.WorkloadSpec) { w.Rollout.MaxSurge = 3 })
	var stale3 []containers.Container
	for i := range 8 {
		stale3 = append(stale3, ctr("s"+strconv.Itoa(i), surge3, i, old, contract.StateRunning))
	}
	w8More := wl("web", 10)
	runDiffCases(t, []diffCase{
		{name: "8 stale replicas: 25% (2) roll at once, lowest slots first",
			desired: desiredOf(w8), actual: stale, want: []string{"start web/0", "start web/1"}},
		{name: "one slot mid-roll: one more may start",
			desired: desiredOf(w8), actual: withReplacement, want: []string{"start web/0"}},
		{name: "a healthy replacement frees its surge place as its stale one rolls",
			desired: desiredOf(w8), actual: withReadyReplacement,
			want: []string{"start web/0", "start web/1", "roll web/3 s3"}},
		{name: "max_surge is honoured",
			desired: desiredOf(surge3), actual: stale3, want: []string{"start web/0", "start web/1", "start web/2"}},
		{name: "filling empty slots is not limited",
			desired: desiredOf(w8More), actual: stale,
			want: []string{"start web/0", "start web/1", "start web/2", "start web/8", "start web/9"}},
	})
}
