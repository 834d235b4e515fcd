package contract

// The one rule of when an egg's replica is ready. The apply's readiness
// checks (provider), the rollout status that `hatch apply` follows and
// `hatch status` shows (fleet) read it, so they never disagree on when an
// egg is done: two rules once let a finished `restart: on-failure` job walk
// the apply on while its rollout stayed "progressing 0/1" for ever.

// Current reports whether c is a container that w, whose spec hash is hash,
// should run: one of its workload, at that spec, in a slot below the
// replica count. Any other container of the workload is on its way out.
// The entry of a refused pull is current only while w pulls with the same
// login: a new password (which rolls nothing) is a new attempt, and a
// report sent before the agent had it says nothing of it.
func (w WorkloadSpec) Current(hash string, c ContainerStatus) bool {
	return c.WorkloadID == w.ID() && c.SpecHash == hash && c.Slot < w.Replicas &&
		(c.FailedPull == "" || c.FailedPull == w.PullLogin())
}

// PullLogin identifies the login w's image is pulled with, for
// ContainerStatus.FailedPull: its handle, or NoPullLogin.
func (w WorkloadSpec) PullLogin() string {
	if w.PullAuth == nil || w.PullAuth.Handle == "" {
		return NoPullLogin
	}
	return w.PullAuth.Handle
}

// NoPullLogin is PullLogin of a workload pulled without a login.
const NoPullLogin = "none"

// Finished reports whether c ran to success and stays that way: it exited
// 0 and w's restart policy does not start a success again (no, on-failure).
// A one-shot egg's replica is done when it is finished.
func (w WorkloadSpec) Finished(c ContainerStatus) bool {
	return c.State == StateCompleted && w.RestartPolicy() != RestartAlways
}

// Failed reports whether c ended in a way nothing will mend at this spec:
// it crashed and w never restarts (restart: no), so a job that needed it to
// complete has failed.
func (w WorkloadSpec) Failed(c ContainerStatus) bool {
	return c.State == StateCrashed && w.RestartPolicy() == RestartNo
}

// ReplicaReady reports whether c counts as a ready replica of w: its
// process runs and passes its health check, or it has finished.
func (w WorkloadSpec) ReplicaReady(c ContainerStatus) bool {
	return c.State == StateRunning && c.Healthy || w.Finished(c)
}
