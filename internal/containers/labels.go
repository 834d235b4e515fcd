package containers

import (
	"strconv"
	"strings"

	"github.com/hatchery/hatchery/internal/contract"
)

// The labels Hatchery puts on everything it creates.
const (
	LabelPrefix    = "io.hatchery."
	LabelManaged   = LabelPrefix + "managed"
	LabelHost      = LabelPrefix + "host"
	LabelNamespace = LabelPrefix + "namespace"
	LabelProject   = LabelPrefix + "project"
	LabelEgg       = LabelPrefix + "egg"
	LabelWorkload  = LabelPrefix + "workload"
	LabelSlot      = LabelPrefix + "slot"
	LabelSpec      = LabelPrefix + "spec"
	LabelBlob      = LabelPrefix + "blob"
	// LabelState and LabelGeneration say which desired state the agent was
	// converging towards when it created the container (see StateStamp).
	LabelState      = LabelPrefix + "state"
	LabelGeneration = LabelPrefix + "generation"
	// LabelTestRun marks objects created by tests, so that a test's cleanup,
	// and CI's sweep of leftovers, remove only those.
	LabelTestRun = LabelPrefix + "test-run"
	// LabelRun carries the run ID on a run's container (contract.Run): it
	// tells a run's container from its egg's replicas, which share its
	// workload label, and lets every start of a run be counted on Docker.
	LabelRun = LabelPrefix + "run"
	// LabelNetworks lists, comma-separated, the networks a terminal's run
	// (contract.Run.TTY) is connected to once made: its attach session,
	// which starts it, waits until it is on all of them (Docker connects
	// all but the first after the create).
	LabelNetworks = LabelPrefix + "networks"
)

// Owned reports whether labels mark an object this host's agent may touch:
// managed by Hatchery and carrying this host's ID.
func Owned(labels map[string]string, hostID string) bool {
	return hostID != "" && labels[LabelManaged] == "true" && labels[LabelHost] == hostID
}

// Labels returns the labels of a new container for a workload's slot: the
// workload's own labels, minus any that use Hatchery's prefix (the spec loader
// refuses those; this is the last line of defence), plus Hatchery's.
func Labels(hostID string, spec contract.WorkloadSpec, slot int, specHash string) map[string]string {
	out := make(map[string]string, len(spec.Labels)+9)
	for k, v := range spec.Labels {
		if !strings.HasPrefix(k, LabelPrefix) {
			out[k] = v
		}
	}
	out[LabelManaged] = "true"
	out[LabelHost] = hostID
	out[LabelNamespace] = spec.Namespace
	out[LabelProject] = spec.Project
	out[LabelEgg] = spec.Egg
	out[LabelWorkload] = spec.ID()
	out[LabelSlot] = strconv.Itoa(slot)
	out[LabelSpec] = specHash
	if spec.BlobID != "" {
		out[LabelBlob] = spec.BlobID
	}
	return out
}

// RunLabels returns the labels of a run's container: its workload's (slot 0)
// and LabelRun with the run's ID. No StateStamp: a run is not a replica of
// the state being converged to, and its container is never held back or
// rolled by the converge.
func RunLabels(hostID string, spec contract.WorkloadSpec, specHash, runID string) map[string]string {
	out := Labels(hostID, spec, 0, specHash)
	out[LabelRun] = runID
	return out
}

// StateStamp names the desired state a container was created for: its
// Version (a content hash: it says which state, not which came first) and
// its Generation, the agent's count of the desired states it has converged
// towards, which orders them. The stamp is written on every container the
// agent creates, so the containers themselves say how recent the state that
// made them is: a desired-state cache whose generation is lower is older
// than they are (its write failed), whatever the clocks say.
//
// A counter rather than a time: the agent's clock and the engine's can
// disagree (a remote engine, or a clock stepped by NTP at boot, which is
// when an agent restarts), and a stamp compared across a restart must not
// depend on either. Zero is "unknown" (a container of an older agent).
type StateStamp struct {
	Version    string
	Generation int64
}

// AddTo writes the stamp into labels (a zero stamp writes nothing) and
// returns them.
func (s StateStamp) AddTo(labels map[string]string) map[string]string {
	if s.Version != "" {
		labels[LabelState] = s.Version
	}
	if s.Generation > 0 {
		labels[LabelGeneration] = strconv.FormatInt(s.Generation, 10)
	}
	return labels
}

// StampFromLabels reads a container's stamp. A missing or malformed
// generation reads as zero: unknown, so never newer than anything.
func StampFromLabels(labels map[string]string) StateStamp {
	s := StateStamp{Version: labels[LabelState]}
	if n, err := strconv.ParseInt(labels[LabelGeneration], 10, 64); err == nil && n > 0 {
		s.Generation = n
	}
	return s
}

// FromLabels returns a Container with its identity read from labels. A missing
// or malformed workload, slot or spec label is recorded in LabelError (and the
// slot defaults to 0) rather than refused: the caller must still be able to see,
// and remove, a container someone tampered with.
func FromLabels(id, name string, labels map[string]string) Container {
	c := Container{
		ID:         id,
		Name:       name,
		WorkloadID: labels[LabelWorkload],
		BlobID:     labels[LabelBlob],
		SpecHash:   labels[LabelSpec],
		RunID:      labels[LabelRun],
		Stamp:      StampFromLabels(labels),
		Labels:     labels,
	}
	var problems []string
	if c.WorkloadID == "" {
		problems = append(problems, "no "+LabelWorkload)
	}
	if c.SpecHash == "" {
		problems = append(problems, "no "+LabelSpec)
	}
	switch s, ok := labels[LabelSlot]; {
	case !ok:
		problems = append(problems, "no "+LabelSlot)
	default:
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || strconv.Itoa(n) != s {
			problems = append(problems, "malformed "+LabelSlot+" "+strconv.Quote(s))
		} else {
			c.Slot = n
		}
	}
	c.LabelError = strings.Join(problems, ", ")
	return c
}
