package cli

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
)

// hostState is one host as status sees it: its liveness, what it should run
// and what its agent last reported.
type hostState struct {
	ID, Name string
	// State is up, down, unknown or removed.
	State   string
	Desired contract.DesiredState
	Report  *contract.StatusReport // nil before the first report
}

// eggStatus is where one egg stands, over every host.
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
}

// Key is "namespace/project/egg".
func (e eggStatus) Key() string { return e.Namespace + "/" + e.Project + "/" + e.Egg }

// workloadProgress is one workload on one host against its spec.
type workloadProgress struct {
	ready, want, others int
	failure             string
	logTail             []string
	restarts, looping   int
}

// assessWorkload compares a host's containers of a workload with the spec it
// should run. A slot is ready when a container at the spec hash runs healthy
// (or, for a one-shot job, has completed); "others" are containers of older
// specs, or of slots beyond the replica count, still running.
func assessWorkload(w contract.WorkloadSpec, containers []contract.ContainerStatus, now time.Time) workloadProgress {
	p := workloadProgress{want: w.Replicas}
	hash := contract.SpecHash(w)
	ready := map[int]bool{}
	for _, c := range containers {
		if c.WorkloadID != w.ID() {
			continue
		}
		p.restarts += c.Restarts
		if c.CrashLoopUntil.After(now) {
			p.looping++
		}
		current := c.SpecHash == hash && c.Slot < w.Replicas
		switch {
		case current && c.RolloutFailure != "":
			p.failure, p.logTail = c.RolloutFailure, c.LogTail
		case current && (c.State == contract.StateRunning && c.Healthy ||
			c.State == contract.StateCompleted && w.RestartPolicy() == contract.RestartNo):
			ready[c.Slot] = true
		case !current && !c.State.Exited():
			p.others++
		}
	}
	p.ready = len(ready)
	return p
}

// eggStatuses sums the hosts' workloads up per egg, sorted by namespace,
// project and egg. A host that is not up counts no replica as ready: its
// last report may be old news.
func eggStatuses(hosts []hostState, now time.Time) []eggStatus {
	byKey := map[string]*eggStatus{}
	var notes = map[string][]string{}
	for _, h := range hosts {
		var containers []contract.ContainerStatus
		if h.Report != nil {
			containers = h.Report.Containers
		}
		for _, w := range h.Desired.Workloads {
			e := byKey[w.ID()]
			if e == nil {
				e = &eggStatus{Namespace: w.Namespace, Project: w.Project, Egg: w.Egg, State: rolloutDone}
				byKey[w.ID()] = e
			}
			p := assessWorkload(w, containers, now)
			e.Desired += p.want
			if w.Replicas > 0 {
				e.Hosts = append(e.Hosts, hostLabel(h))
			}
			e.Restarts += p.restarts
			e.CrashLooping += p.looping
			if h.State == "up" {
				e.Previous += p.others
			}
			switch {
			case h.State != "up" && w.Replicas > 0:
				notes[w.ID()] = append(notes[w.ID()], fmt.Sprintf("host %s is %s", hostLabel(h), h.State))
				e.State = worse(e.State, rolloutProgressing)
			case p.failure != "":
				e.Ready += p.ready
				e.State = rolloutFailed
				e.Detail, e.LogTail = fmt.Sprintf("on %s: %s", hostLabel(h), p.failure), p.logTail
			default:
				e.Ready += p.ready
				if p.ready < p.want || p.others > 0 {
					e.State = worse(e.State, rolloutProgressing)
				}
			}
		}
	}
	out := make([]eggStatus, 0, len(byKey))
	for id, e := range byKey {
		if e.State != rolloutFailed && len(notes[id]) > 0 {
			e.Detail = strings.Join(notes[id], ", ")
		}
		slices.Sort(e.Hosts)
		out = append(out, *e)
	}
	sortEggs(out)
	return out
}

// addUnplaced adds what the deployed eggs of a project say about replicas
// no host runs: a cold egg (no replica anywhere) is listed done at 0/0, and
// replicas not placed are desired, with the reason, and keep it waiting.
func addUnplaced(eggs []eggStatus, namespace string, p deployedProject) []eggStatus {
	index := map[string]int{}
	for i, e := range eggs {
		index[e.Key()] = i
	}
	for _, r := range p.Resources {
		if r.Type != "egg" {
			continue
		}
		key := namespace + "/" + p.Name + "/" + r.Name
		i, ok := index[key]
		if !ok {
			eggs = append(eggs, eggStatus{Namespace: namespace, Project: p.Name, Egg: r.Name, State: rolloutDone})
			i = len(eggs) - 1
			index[key] = i
		}
		unplaced, _ := r.Outputs["unplaced"].(float64)
		if unplaced <= 0 {
			continue
		}
		e := &eggs[i]
		e.Desired += int(unplaced)
		if e.State != rolloutFailed {
			e.State = rolloutWaiting
			waiting, _ := r.Outputs["waiting"].(string)
			e.Detail = fmt.Sprintf("%d not placed", int(unplaced))
			if waiting != "" {
				e.Detail += ": " + waiting
			}
		}
	}
	sortEggs(eggs)
	return eggs
}

func sortEggs(eggs []eggStatus) {
	slices.SortFunc(eggs, func(a, b eggStatus) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Project, b.Project), cmp.Compare(a.Egg, b.Egg))
	})
}

// worse returns the state further from done: failed, then waiting, then
// rolling, then done.
func worse(a, b rolloutState) rolloutState {
	rank := map[rolloutState]int{rolloutDone: 0, rolloutProgressing: 1, rolloutWaiting: 2, rolloutFailed: 3}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

func hostLabel(h hostState) string {
	if h.Name != "" {
		return h.Name
	}
	return h.ID
}

// fetchHosts reads every host that is not removed, with its desired state
// and last report.
func fetchHosts(ctx context.Context, api projectAPI) ([]hostState, error) {
	hosts, err := api.c.Hosts(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]hostState, 0, len(hosts))
	for _, h := range hosts {
		if !h.RemovedAt.IsZero() {
			continue
		}
		desired, err := api.HostDesired(ctx, h.ID)
		if err != nil {
			return nil, err
		}
		report, err := api.HostReport(ctx, h.ID)
		if err != nil {
			return nil, err
		}
		out = append(out, hostState{ID: h.ID, Name: h.Name, State: h.State, Desired: desired, Report: report})
	}
	return out, nil
}

// projectEggs is the status of one project's eggs, and how many hosts are
// up.
func projectEggs(ctx context.Context, api projectAPI, namespace, project string, now time.Time) (eggs []eggStatus, hostsUp int, err error) {
	hosts, err := fetchHosts(ctx, api)
	if err != nil {
		return nil, 0, err
	}
	for _, h := range hosts {
		if h.State == "up" {
			hostsUp++
		}
	}
	for _, e := range eggStatuses(hosts, now) {
		if e.Namespace == namespace && e.Project == project {
			eggs = append(eggs, e)
		}
	}
	deployed, ok, err := api.Project(ctx, namespace, project)
	if err != nil || !ok {
		return eggs, hostsUp, err
	}
	return addUnplaced(eggs, namespace, deployed), hostsUp, nil
}
