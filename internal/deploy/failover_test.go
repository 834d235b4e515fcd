package deploy

import (
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

func failoverResources(after, stop string) []api.DesiredResource {
	egg := inputs.Egg{StopTimeout: stop}
	vol := inputs.Volume{Egg: "db", Backup: &inputs.VolumeBackup{}, Failover: &inputs.VolumeFailover{After: after}}
	return []api.DesiredResource{
		{Type: resource.Egg, Name: "db", Inputs: inputs.Encode(egg)},
		{Type: resource.Volume, Name: "data", Inputs: inputs.Encode(vol)},
	}
}

func TestCheckFailoverNeedsAfterAboveTheFenceAndTheStop(t *testing.T) {
	// 60s fence + 30s request timeout + 10s default drain + 40s stop = 140s.
	if err := checkFailover(failoverResources("141s", "40s"), time.Minute, 30*time.Second); err != nil {
		t.Errorf("after 141s > 140s refused: %v", err)
	}
	err := checkFailover(failoverResources("140s", "40s"), time.Minute, 30*time.Second)
	if err == nil {
		t.Fatal("after 140s, not above fence_after + request timeout + drain + stop (140s), accepted")
	}
	for _, want := range []string{"resources[1] (volume \"data\") inputs.failover.after", "--fence-after", "--request-timeout", "egg db's stop_timeout 40s", "drain_timeout 10s", "2m20s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if e, ok := err.(*api.Error); !ok || e.Code != api.CodeBadRequest {
		t.Errorf("error %#v is not a bad request", err)
	}
	if err := checkFailover(failoverResources("1h", ""), 0, 30*time.Second); err == nil || !strings.Contains(err.Error(), "--fence-after 0") {
		t.Errorf("a failover on a server without fencing: %v, want refused naming --fence-after", err)
	}
	if err := checkFailover(failoverResources("", "")[:1], time.Minute, time.Second); err != nil {
		t.Errorf("no volume with failover, yet: %v", err)
	}
}

// The fence scales the egg to 0, which stops it with its own timeouts:
// short ones count as they are (the test settings: 5s fence, 2s
// request timeout, 1s drain and stop leave 12s enough).
func TestCheckFailoverCountsTheEggsOwnShortTimeouts(t *testing.T) {
	rs := failoverResources("10s", "1s")
	egg, _ := inputs.Decode[inputs.Egg](rs[0].Inputs)
	egg.Rollout.DrainTimeout = "1s"
	rs[0].Inputs = inputs.Encode(egg)
	if err := checkFailover(rs, 5*time.Second, 2*time.Second); err != nil {
		t.Errorf("after 10s > 5s + 2s + 1s + 1s refused: %v", err)
	}
	rs[1].Inputs["failover"] = map[string]any{"after": "9s"}
	if err := checkFailover(rs, 5*time.Second, 2*time.Second); err == nil {
		t.Error("after 9s, not above 9s, accepted")
	}
}
