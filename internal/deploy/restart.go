package deploy

import (
	"context"
	"fmt"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

// RestartEgg is hatch rollout restart: the egg's revision is bumped, so
// the same spec rolls again on every host that runs it. It holds the
// project's lease while it works (api.CodeLocked when another holds it); an
// egg not deployed gives api.CodeNotFound.
func (s *Service) RestartEgg(ctx context.Context, project, egg string) (api.RestartResult, error) {
	l, err := s.acquire(ctx, project, "rollout restart of egg/"+egg)
	if err != nil {
		return api.RestartResult{}, s.lockedError(err)
	}
	defer l.release()
	ctx = l.fenced(ctx)
	rec, err := s.record(ctx, project, resource.Key(resource.Egg, egg))
	if err != nil {
		return api.RestartResult{}, err
	}
	next, err := s.deps.Providers.RestartEgg(ctx, project, rec)
	if err != nil {
		return api.RestartResult{}, err
	}
	if err := s.putRecord(ctx, project, next); err != nil {
		return api.RestartResult{}, err
	}
	var rev int64 // as the provider wrote it, or as a store gave it back
	switch n := next.Outputs["revision"].(type) {
	case int:
		rev = int64(n)
	case float64:
		rev = int64(n)
	}
	s.event(ctx, store.Event{Type: store.EventRolloutRestarted, Project: project, Resource: next.Key(),
		Message: fmt.Sprintf("egg %s of %s rolls again at revision %d", egg, project, rev)})
	out := api.RestartResult{Egg: egg, Revision: rev, Hosts: []string{}}
	hosts, _ := next.Outputs["hosts"].([]any)
	for _, h := range hosts {
		out.Hosts = append(out.Hosts, fmt.Sprint(h))
	}
	return out, nil
}

// record returns one deployed record of the project, or a 404.
func (s *Service) record(ctx context.Context, project, key string) (*resource.Deployed, error) {
	recs, err := s.deps.Resources.ListResources(ctx, project)
	if err != nil {
		return nil, err
	}
	for _, rec := range recs {
		if rec.Key() == key && !rec.Pending {
			return rec, nil
		}
	}
	return nil, api.NotFound("%s has no %s (apply it first)", project, key)
}
