package contract

import "time"

// Run is one run of an egg's command in a container of its own: a `hatch
// run`, or a tick of the egg's schedule. The control plane records a run
// (fenced, under its loops' or the project's lease) before it puts it in the
// desired state of the one host that runs it. The agent starts a run at
// most once: its container is named by the run ID (RunContainerName), so a
// restarted agent that finds the container never starts it again. A run's
// container is kept while the run is in the desired state and removed once
// it leaves it, which it does after the control plane has recorded its end
// (and, for the runs it keeps, once they are pruned).
type Run struct {
	// ID is unique in the cluster; it names the run's container and labels
	// it (containers.LabelRun), so every start can be counted on Docker.
	ID string `json:"id"`
	// Workload is the spec the run's container is made from: the egg's
	// image or build, env, secrets, volumes, networks and the names it
	// reaches others by, with Command set to the run's, Replicas 1, and no
	// routes, published ports, health check or restart policy.
	Workload WorkloadSpec `json:"workload"`
	// Timeout stops the run this long after its container started (0: no
	// limit); the agent reports it as RunTimedOut.
	Timeout time.Duration `json:"timeout,omitempty"`
	// Stop asks the agent to stop the run (Ctrl-C on `hatch run`,
	// `concurrency: replace`): the workload's stop signal, then SIGKILL after
	// its stop timeout. A run not started yet is never started.
	Stop bool `json:"stop,omitempty"`
	// TTY (`hatch run -it`): the container is made with a terminal and an
	// open stdin (closed when its operator leaves), and is not started by
	// the agent: the run's attach session (SessionAttach) starts it once
	// the operator's stream is attached, so the first output is seen. Until
	// then it is RunPending; a Stop ends it without starting it.
	TTY bool `json:"tty,omitempty"`
}

// RunState is where a run is, as its host reports it.
type RunState string

const (
	// RunPending: not started yet (its image is pulled or built first).
	RunPending RunState = "pending"
	// RunRunning: its container runs.
	RunRunning RunState = "running"
	// RunExited: its command ended by itself, with ExitCode.
	RunExited RunState = "exited"
	// RunTimedOut: stopped by the agent past its Timeout.
	RunTimedOut RunState = "timed_out"
	// RunStopped: stopped because the desired state asked (Run.Stop).
	RunStopped RunState = "stopped"
	// RunFailed: it could not start (Error says why: an image that cannot
	// be pulled, a volume in use); it is never tried again.
	RunFailed RunState = "failed"
)

// Ended reports whether the run is over: its end can be recorded, and it
// never runs again.
func (s RunState) Ended() bool {
	switch s {
	case RunExited, RunTimedOut, RunStopped, RunFailed:
		return true
	}
	return false
}

// RunStatus is one run of the desired state as its host sees it; the status
// report carries one for every run in the host's desired state.
type RunStatus struct {
	ID          string   `json:"id"`
	ContainerID string   `json:"container_id,omitempty"`
	State       RunState `json:"state"`
	// ExitCode is the command's exit code once it ended (RunExited,
	// RunTimedOut and RunStopped: the code of the signal's exit).
	ExitCode  int       `json:"exit_code,omitempty"`
	StartedAt time.Time `json:"started_at,omitzero"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	// Error says why a run failed to start (RunFailed), or what its host
	// could not do with it.
	Error string `json:"error,omitempty"`
}

// RunContainerName returns the Docker name of a run's container:
// hatch-<project>-<egg>-run-<run ID>. A second create of the same run meets
// Docker's name conflict, which is what makes a run start at most once.
func RunContainerName(project, egg, runID string) string {
	return "hatch-" + project + "-" + egg + "-run-" + runID
}
