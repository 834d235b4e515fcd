package deploy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/desired"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

// checkFailover refuses a volume whose failover.after is too short for the
// fence to be up before the volume may be restored elsewhere: the lost
// host's agent stops the egg only fence_after after its last answered
// report, a report may take the request timeout to be answered, and the
// stop itself takes the egg's drain and stop timeouts. after must exceed
// their sum, and the error names each term so the user knows which setting
// to change. CheckResource has checked each volume's block already.
func checkFailover(resources []api.DesiredResource, fenceAfter, requestTimeout time.Duration) error {
	eggs := map[string]inputs.Egg{}
	for _, d := range resources {
		if d.Type != resource.Egg {
			continue
		}
		if in, err := inputs.Decode[inputs.Egg](d.Inputs); err == nil {
			eggs[d.Name] = in
		}
	}
	for i, d := range resources {
		if d.Type != resource.Volume {
			continue
		}
		in, err := inputs.Decode[inputs.Volume](d.Inputs)
		if err != nil || in.Failover == nil {
			continue
		}
		after, err := time.ParseDuration(in.Failover.After)
		if err != nil {
			continue // CheckResource refused it
		}
		if fenceAfter <= 0 {
			return api.BadRequest("resources[%d] (volume %q) inputs.failover.after: the server runs without fencing (hatch server --fence-after 0), so a host cut off from it would keep running the egg while the volume is restored elsewhere: start the server with --fence-after, or remove failover", i, d.Name)
		}
		drain, stop := timeoutOr(eggs[in.Egg].Rollout.DrainTimeout, contract.DefaultDrainTimeout), timeoutOr(eggs[in.Egg].StopTimeout, contract.DefaultStopTimeout)
		terms := []struct {
			name string
			d    time.Duration
		}{
			{"the server's fence_after (--fence-after)", fenceAfter},
			{"its request timeout (--request-timeout)", requestTimeout},
			{fmt.Sprintf("egg %s's rollout.drain_timeout", in.Egg), drain},
			{fmt.Sprintf("egg %s's stop_timeout", in.Egg), stop},
		}
		var sum time.Duration
		parts := make([]string, len(terms))
		for j, t := range terms {
			sum += t.d
			parts[j] = fmt.Sprintf("%s %s", t.name, t.d)
		}
		if after <= sum {
			return api.BadRequest("resources[%d] (volume %q) inputs.failover.after: %s is too short: it must exceed %s (%s), or the volume could be restored elsewhere before this host has stopped the egg: raise after above %s, or lower those settings",
				i, d.Name, after, sum, strings.Join(parts, " + "), sum)
		}
	}
	return nil
}

// timeoutOr parses an egg's timeout: the agent's fence scales the egg to 0
// replicas, which drains and stops it with its own timeouts. Unset or
// unreadable (the egg's own checks refuse that) is def, the default.
func timeoutOr(s string, def time.Duration) time.Duration {
	d, err := time.ParseDuration(s)
	if s == "" || err != nil {
		return def
	}
	return d
}

// failoverNotes tell, for each of the project's volumes that failed over
// and whose stale copy is still kept, where it runs now and how much data
// its failover may have lost: what the user should know before changing
// it, until the stale copy is forgotten.
func (s *Service) failoverNotes(ctx context.Context, project string, records []*resource.Deployed) ([]string, error) {
	stale, err := s.deps.Providers.StaleCopies(ctx, project)
	if err != nil || len(stale) == 0 {
		return nil, err
	}
	var notes []string
	for _, r := range records {
		if r.Type != resource.Volume || !slices.ContainsFunc(stale, func(c desired.StaleCopy) bool { return c.Volume == r.Name }) {
			continue
		}
		out, _ := r.Outputs[inputs.OutputFailover].(map[string]any)
		fo, err := inputs.Decode[api.VolumeFailover](out)
		if err != nil || fo.To == "" {
			continue
		}
		notes = append(notes, fmt.Sprintf("volume %s failed over at %s from host %s to host %s, restored from the backup taken %s: up to %s of writes are lost; its stale copy is kept (hatch status lists it)",
			r.Name, fo.At.UTC().Format(time.RFC3339), fo.From, fo.To, fo.BackupCreated.UTC().Format(time.RFC3339), fo.DataWindow))
	}
	return notes, nil
}
