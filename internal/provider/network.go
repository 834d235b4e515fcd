package provider

import (
	"context"

	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

// networkProvider records networks. There is nothing to write: a network's
// Docker name differs per host, so the egg provider names it on each host
// where a workload joins it, the agents create it on demand and prune it once
// nothing uses it.
type networkProvider struct{}

func (networkProvider) Schema() reconciler.Schema {
	return reconciler.Schema{Outputs: outputsOf(resource.Network)}
}

func (networkProvider) Diff(deployed, desired map[string]any) []string {
	return reconciler.DiffInputs(deployed, desired)
}

func (networkProvider) Create(_ context.Context, _ string, r *resource.Deployed) (map[string]any, error) {
	return map[string]any{inputs.OutputName: r.Name}, nil
}

func (networkProvider) Update(_ context.Context, _ string, _, next *resource.Deployed) (map[string]any, error) {
	return map[string]any{inputs.OutputName: next.Name}, nil
}

func (networkProvider) Delete(context.Context, string, *resource.Deployed) error { return nil }

func (networkProvider) Ready(context.Context, string, *resource.Deployed, resource.Condition) (bool, string, error) {
	return true, "", nil
}
