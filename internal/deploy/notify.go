package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/store"
)

// NotifyTargets returns a project's own webhooks: the notify: of its newest
// apply that kept its inputs (a destroy keeps none, so the project's last
// webhooks hear of its destroy). A project never applied has none. They
// are read from the apply record, not from the live spec, so that what a
// plan changes in them takes effect with its apply, and a rollback brings
// back the apply's.
func (s *Service) NotifyTargets(ctx context.Context, project string) ([]inputs.NotifyTarget, error) {
	applies, err := s.deps.Applies.Applies(ctx, project)
	if err != nil {
		return nil, err
	}
	for _, a := range applies {
		if !a.HasInputs {
			continue
		}
		raw, err := s.deps.Applies.ApplyInputs(ctx, project, a.ID)
		if errors.Is(err, store.ErrNotFound) {
			continue // dropped from the history meanwhile: the next older one
		}
		if err != nil {
			return nil, err
		}
		var in planInputs
		if err := json.Unmarshal(raw, &in); err != nil {
			return nil, fmt.Errorf("inputs of apply %d of %s: %w", a.ID, project, err)
		}
		return in.Notify, nil
	}
	return nil, nil
}

// notifyChanged reports whether a plan of in changes the project's webhooks:
// such a plan has changes to apply even when no resource changes. A destroy
// changes none (its apply keeps no inputs).
func (s *Service) notifyChanged(ctx context.Context, project string, in planInputs) (bool, error) {
	if in.Destroy {
		return false, nil
	}
	current, err := s.NotifyTargets(ctx, project)
	if err != nil {
		return false, err
	}
	return !slices.Equal(current, in.Notify), nil
}
