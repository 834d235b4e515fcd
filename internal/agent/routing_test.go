package agent

import (
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/converge"
)

func TestInPoolKeepsAHealthyBackendUntilItsRetriesFail(t *testing.T) {
	started := time.Unix(1000, 0)
	seenHealthy := func(at time.Time) *converge.History {
		h := converge.NewHistory()
		h.Containers["c1"] = converge.ContainerHistory{HealthyStart: at}
		return h
	}
	tests := []struct {
		name    string
		healthy bool
		streak  int
		history *converge.History
		want    bool
	}{
		{name: "a passing backend is in", healthy: true, history: converge.NewHistory(), want: true},
		{name: "one failed check after a pass keeps it in", streak: 1, history: seenHealthy(started), want: true},
		{name: "retries-1 failed checks keep it in", streak: 2, history: seenHealthy(started), want: true},
		{name: "retries failed checks take it out", streak: 3, history: seenHealthy(started), want: false},
		{name: "a backend never seen passing waits for a pass", streak: 1, history: converge.NewHistory(), want: false},
		{name: "a pass of an earlier incarnation does not count after a restart", history: seenHealthy(started.Add(-time.Minute)), want: false},
		{name: "without a history only a pass counts", streak: 1, history: nil, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := containers.Container{ID: "c1", State: contract.StateRunning, StartedAt: started, Healthy: tt.healthy, FailingStreak: tt.streak}
			if got := inPool(c, tt.history, 3); got != tt.want {
				t.Errorf("inPool = %v, want %v", got, tt.want)
			}
		})
	}
}

// The history the converge engine keeps is what carries the pass over to the
// routing table: seen healthy by one converge, a backend that misses a check
// stays in the table's pool until the workload's retries have failed.
func TestRoutingTableKeepsABackendThatMissedOneCheck(t *testing.T) {
	w := web(1)
	w.Routes = []contract.Route{{Host: "shop.localhost"}}
	w.Health = contract.HealthCheck{HTTP: "/healthz", Retries: 2}
	desired := desiredState(w)
	now := time.Unix(2000, 0)
	c := containers.FromLabels("c1", "n-c1", containers.Labels(testHost, w, 0, contract.SpecHash(w)))
	c.State, c.IP, c.StartedAt = contract.StateRunning, "10.0.0.1", now.Add(-time.Minute)
	history := converge.NewHistory()

	pooled := func(c containers.Container) bool {
		history.Observe(desired, []containers.Container{c}, now) // as Converge does before routing
		table := routingTable(desired, []containers.Container{c}, history)
		return table.Eggs[0].Backends[0].Healthy
	}
	c.FailingStreak = 1
	if pooled(c) {
		t.Fatal("a backend that never passed joined the pool")
	}
	c.Healthy, c.FailingStreak = true, 0
	if !pooled(c) {
		t.Fatal("a passing backend is not in the pool")
	}
	c.Healthy, c.FailingStreak = false, 1
	if !pooled(c) {
		t.Error("one missed check took the backend out of the pool")
	}
	c.FailingStreak = 2
	if pooled(c) {
		t.Error("the backend stayed in the pool after its retries failed")
	}
}
