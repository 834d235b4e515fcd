package provider

import (
	"context"

	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

// volumeProvider chooses volumes' hosts and lists them in those hosts'
// desired states.
type volumeProvider struct {
	s    *Set
	opts Options
}

func (volumeProvider) Schema() reconciler.Schema {
	return reconciler.Schema{Outputs: outputsOf(resource.Volume)}
}

func (volumeProvider) Diff(deployed, desired map[string]any) []string {
	return reconciler.DiffInputs(deployed, desired)
}

// Create chooses the volume's host, or adopts the host that lists it already
// (an earlier attempt, or a volume retained after it left the file and now
// back: its data is there).
func (p volumeProvider) Create(ctx context.Context, project string, r *resource.Deployed) (map[string]any, error) {
	host, err := p.s.PlaceVolume(ctx, project, r)
	if err != nil {
		return nil, err
	}
	return map[string]any{inputs.OutputName: r.Name, inputs.OutputHost: host}, nil
}

// Update keeps the volume where it is: a volume's host is chosen once (a
// failover alone moves it, and writes its record itself).
func (p volumeProvider) Update(ctx context.Context, project string, prev, next *resource.Deployed) (map[string]any, error) {
	host, _ := prev.Outputs[inputs.OutputHost].(string)
	if host == "" {
		return p.Create(ctx, project, next)
	}
	if err := p.s.KeepVolume(ctx, project, next.Name, host); err != nil {
		return nil, err
	}
	out := map[string]any{inputs.OutputName: next.Name, inputs.OutputHost: host}
	if fo, ok := prev.Outputs[inputs.OutputFailover]; ok {
		out[inputs.OutputFailover] = fo // what the last failover did stays told
	}
	return out, nil
}

// Delete retains the volume on its host, or, with Options.DeleteVolumes,
// marks it for deletion there.
func (p volumeProvider) Delete(ctx context.Context, project string, r *resource.Deployed) error {
	return p.s.RemoveVolume(ctx, project, r.Name, p.opts.DeleteVolumes)
}

func (volumeProvider) Ready(context.Context, string, *resource.Deployed, resource.Condition) (bool, string, error) {
	return true, "", nil
}
