package fleet

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/store"
)

// A host is trusted with what the control plane placed on it, and nothing
// more. Its report is stored whole (hatch destroy waits for every container
// a host reports to go, a lie included), but whatever acts on a report (the
// target of an exec or of a logs session, readiness, rollout status) reads
// only the containers of workloads the host's own desired state places on
// it: a host that reports a replica of an egg placed elsewhere is not
// offered that egg's sessions, and its claim is shown as a host problem.

// placedOnly returns the containers of workloads that the host's desired
// state places on it (workloads); the others are claims nothing acts on.
func placedOnly(workloads []contract.WorkloadSpec, cs []contract.ContainerStatus) []contract.ContainerStatus {
	var out []contract.ContainerStatus
	for _, c := range cs {
		if slices.ContainsFunc(workloads, func(w contract.WorkloadSpec) bool { return w.ID() == c.WorkloadID }) {
			out = append(out, c)
		}
	}
	return out
}

// logTarget is what host h may send of a logs request: the eggs placed on
// it (egg's only, if set), or, for a run, egg if the run is in its desired
// state as a run of that egg, else nothing.
func logTarget(h statusHost, egg, run string) LogTarget {
	t := LogTarget{Host: h.ID}
	if run != "" {
		if placed, ok := h.Runs[run]; ok && placed == egg {
			t.Eggs = []string{egg}
		}
		return t
	}
	for _, w := range h.Workloads {
		if (egg == "" || w.Egg == egg) && !slices.Contains(t.Eggs, w.Egg) {
			t.Eggs = append(t.Eggs, w.Egg)
		}
	}
	return t
}

// maxUnplacedNamed bounds how many unplaced containers a host problem
// names: a report may carry thousands.
const maxUnplacedNamed = 5

// unplacedProblem says, as a host problem, which containers a report claims
// run for workloads the host's desired state does not place on it, once the
// agent says it converged towards that very state (desiredVersion, its
// stored state's with the peers'): before that, a replica just moved away is
// still being stopped. Containers exited or draining are on their way out,
// and left unsaid. "" when there is none.
func unplacedProblem(desired store.DesiredState, desiredVersion string, report contract.StatusReport) (string, error) {
	if report.Version == "" || report.Version != desiredVersion {
		return "", nil
	}
	placed := map[string]bool{}
	if len(desired.Doc) > 0 {
		d, err := contract.DecodeDesiredState(bytes.NewReader(desired.Doc))
		if err != nil {
			return "", fmt.Errorf("host %s: stored desired state: %w", desired.HostID, err)
		}
		for _, w := range d.Workloads {
			placed[w.ID()] = true
		}
	}
	var named []string
	n := 0
	for _, c := range report.Containers {
		if placed[c.WorkloadID] || c.State.Exited() || c.State == contract.StateDraining {
			continue
		}
		if n++; n <= maxUnplacedNamed {
			named = append(named, fmt.Sprintf("%q slot %d", c.WorkloadID, c.Slot))
		}
	}
	if n == 0 {
		return "", nil
	}
	more := ""
	if n > len(named) {
		more = fmt.Sprintf(" and %d more", n-len(named))
	}
	return fmt.Sprintf("reports %d containers of workloads not placed on it (%s%s): "+
		"they get no exec or logs session and count for no readiness; check the host, it may be compromised",
		n, strings.Join(named, ", "), more), nil
}
