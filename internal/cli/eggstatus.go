package cli

import (
	"cmp"
	"context"
	"slices"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/contract"
)

// eggStatus is where one egg stands, over every host, as status and the
// rollout following show it. The server works it out (GET .../status); the
// CLI only renders it.
type eggStatus struct {
	Namespace, Project, Egg string
	// Ready counts replicas ready at the egg's current spec: running and
	// healthy, or for a one-shot job, completed. Desired is the replica count
	// placed on hosts plus those not placed.
	Ready, Desired int
	State          rolloutState
	// Hosts are the names of the hosts the egg's replicas are placed on.
	Hosts []string
	// Detail says what is in the way: a failed rollout's reason, hosts down,
	// replicas not placed.
	Detail string
	// LogTail is the failing container's last log lines, for a failed rollout.
	LogTail []string
	// Previous counts containers of an older spec still running: during a
	// roll, or after a failed one, they are what serves.
	Previous int
	// Restarts sums the in-place restarts of its containers; CrashLooping
	// counts those the agent holds back from restarting now.
	Restarts, CrashLooping int
	// HostErrors are the problems its hosts' agents last reported, each
	// "host: problem", sorted.
	HostErrors []string
}

// rolloutStates maps the server's rollout states to the CLI's words.
var rolloutStates = map[api.RolloutState]rolloutState{
	api.RolloutDone: rolloutDone, api.RolloutProgressing: rolloutProgressing, api.RolloutWaiting: rolloutWaiting,
	api.RolloutFailed: rolloutFailed,
}

// eggStatuses turns the server's status of a project into the CLI's view,
// in the server's order (by egg name). A state the CLI does not know is
// shown as the server says it.
func eggStatuses(s api.ProjectStatus) []eggStatus {
	out := make([]eggStatus, 0, len(s.Eggs))
	for _, e := range s.Eggs {
		state, ok := rolloutStates[e.Rollout.State]
		if !ok {
			state = rolloutState(e.Rollout.State)
		}
		v := eggStatus{Namespace: s.Namespace, Project: s.Project, Egg: e.Name, Ready: e.Ready, Desired: e.Desired,
			State: state, Detail: e.Rollout.Reason, LogTail: e.Rollout.LogTail, Previous: e.Previous,
			Restarts: e.Restarts, CrashLooping: e.CrashLooping}
		for _, h := range e.Hosts {
			if h.Desired > 0 {
				v.Hosts = append(v.Hosts, cmp.Or(h.Name, h.ID))
			}
			for _, line := range h.Errors {
				v.HostErrors = append(v.HostErrors, cmp.Or(h.Name, h.ID)+": "+line)
			}
		}
		slices.Sort(v.Hosts)
		slices.Sort(v.HostErrors)
		v.HostErrors = slices.Compact(v.HostErrors)
		out = append(out, v)
	}
	return out
}

// projectEggs is the status of one project's eggs, and how many hosts are
// up. A project the server does not know (yet) has no eggs.
func projectEggs(ctx context.Context, c *client.Client, namespace, project string) (eggs []eggStatus, hostsUp int, err error) {
	s, _, err := c.Projects().Status(ctx, namespace, project)
	if err != nil {
		return nil, 0, err
	}
	return eggStatuses(s), s.HostsUp, nil
}

// hostState is one host and what its agent last reported: enough to tell
// which containers still run (destroy waits for them to go).
type hostState struct {
	ID, Name string
	// State is up, down or unknown.
	State  string
	Report *contract.StatusReport // nil before the first report
}

func hostLabel(h hostState) string { return cmp.Or(h.Name, h.ID) }

// fetchHosts reads every host that is not removed, with its last report.
func fetchHosts(ctx context.Context, c *client.Client) ([]hostState, error) {
	hosts, err := c.Hosts().List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]hostState, 0, len(hosts))
	for _, h := range hosts {
		if !h.RemovedAt.IsZero() {
			continue
		}
		report, err := c.Hosts().Report(ctx, h.ID)
		if err != nil {
			return nil, err
		}
		out = append(out, hostState{ID: h.ID, Name: h.Name, State: h.State, Report: report})
	}
	return out, nil
}
