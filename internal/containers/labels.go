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
	// LabelTestRun marks objects created by tests, so that a test's cleanup,
	// and CI's sweep of leftovers, remove only those.
	LabelTestRun = LabelPrefix + "test-run"
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
