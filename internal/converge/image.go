package converge

import (
	"errors"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

// ImageFailures returns the failed rollouts that failed starts stand for:
// a start of a desired workload at its current spec whose image the
// registry refused (a *containers.ImageError) with the login the workload
// still has. Retrying such a start mends nothing, so the rollout has
// failed: its old containers keep serving, and the report says why. A
// run's start is left to the run.
func ImageFailures(desired contract.DesiredState, failed []containers.TaskFailure) []Failure {
	specs := make(map[string]contract.WorkloadSpec, len(desired.Workloads))
	for _, w := range desired.Workloads {
		specs[w.ID()] = w
	}
	var out []Failure
	for _, f := range failed {
		p := f.Task.Placeholder
		var ie *containers.ImageError
		if f.Task.Kind != containers.TaskStart || p.RunID != "" || !errors.As(f.Err, &ie) {
			continue
		}
		w, ok := specs[p.WorkloadID]
		if !ok || contract.SpecHash(w) != p.SpecHash || w.PullLogin() != loginOrNone(ie.Login) {
			continue
		}
		out = append(out, Failure{WorkloadID: p.WorkloadID, SpecHash: p.SpecHash, Reason: ie.Error(), Image: true, Login: w.PullLogin()})
	}
	return out
}

// loginOrNone is a login handle as contract.WorkloadSpec.PullLogin writes it.
func loginOrNone(handle string) string {
	if handle == "" {
		return contract.NoPullLogin
	}
	return handle
}
