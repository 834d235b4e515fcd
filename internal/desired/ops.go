package desired

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/hatchery/hatchery/internal/placement"
	"github.com/hatchery/hatchery/internal/resource"
)

// The egg operations the control plane runs outside an apply. Each takes the
// egg's deployed record, writes the hosts' desired states, and returns the
// record to store in its place; the caller holds the project's lease and
// stores the record (with resource.updated, the change shows in the project).

// RestartEgg bumps the egg's revision, which is part of its spec hash: the
// same spec rolls again (hatch rollout restart; also how a failed rollout is
// retried).
func (s *States) RestartEgg(ctx context.Context, project string, rec *resource.Deployed) (*resource.Deployed, error) {
	if err := checkEgg(rec); err != nil {
		return nil, err
	}
	e, err := NewEgg(project, rec.Name, rec.Inputs, rec.Source, RevisionOf(rec.Outputs)+1)
	if err != nil {
		return nil, err
	}
	outputs, err := s.PlaceEgg(ctx, project, e, PreviousOf(rec.Outputs))
	if err != nil {
		return nil, err
	}
	next := rec.Clone()
	next.Outputs = outputs
	return next, nil
}

// Revert puts back the inputs the egg had before its last spec change
// (rollout.auto_revert, after a failed rollout). The record it returns has
// those inputs, so the next plan shows the file's spec as a change again, and
// no previous spec: a revert is never reverted. ok is false when there is
// nothing to go back to.
func (s *States) Revert(ctx context.Context, project string, rec *resource.Deployed) (next *resource.Deployed, ok bool, err error) {
	if err := checkEgg(rec); err != nil {
		return nil, false, err
	}
	prev := PreviousOf(rec.Outputs)
	if prev == nil {
		return nil, false, nil
	}
	e, err := NewEgg(project, rec.Name, prev.Inputs, prev.Source, RevisionOf(rec.Outputs))
	if err != nil {
		return nil, false, err
	}
	outputs, err := s.PlaceEgg(ctx, project, e, nil)
	if err != nil {
		return nil, false, err
	}
	next = rec.Clone()
	next.Inputs, next.Source = prev.Inputs, prev.Source
	next.Outputs = outputs
	return next, true, nil
}

// Reschedule places the project's eggs again with their deployed inputs,
// parents first: replicas leave hosts down past the reschedule delay or
// removed, and unplaced replicas find room. The scheduler keeps every valid
// slot, so an egg with nothing to move writes nothing. It returns the records
// that changed.
func (s *States) Reschedule(ctx context.Context, project string, recs []*resource.Deployed) ([]*resource.Deployed, error) {
	var changed []*resource.Deployed
	var errs []error
	for _, rec := range eggsInOrder(recs) {
		e, err := NewEgg(project, rec.Name, rec.Inputs, rec.Source, RevisionOf(rec.Outputs))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		outputs, err := s.PlaceEgg(ctx, project, e, PreviousOf(rec.Outputs))
		if err != nil {
			errs = append(errs, fmt.Errorf("place %s: %w", rec.Key(), err))
			continue
		}
		if resource.Equal(outputs, rec.Outputs) {
			continue
		}
		next := rec.Clone()
		next.Outputs = outputs
		changed = append(changed, next)
	}
	return changed, errors.Join(errs...)
}

// Hosts lists the fleet as the scheduler sees it.
func (s *States) Hosts(ctx context.Context) ([]placement.Host, error) {
	hosts, err := s.fleet.Hosts(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]placement.Host, len(hosts))
	for i, h := range hosts {
		out[i] = h.Host
	}
	return out, nil
}

// HostClass is how placement treats a host now: "live" (takes replicas),
// "waiting" (keeps its replicas: unknown, or down for less than the
// reschedule delay) or "gone" (its stateless replicas move: down past the
// delay, or removed).
func (s *States) HostClass(h placement.Host, now time.Time) string {
	switch {
	case h.Removed || h.State == placement.HostDown && now.Sub(h.DownSince) >= s.delay:
		return "gone"
	case h.State == placement.HostLive:
		return "live"
	}
	return "waiting"
}

// NeedsPlacing reports whether Reschedule may change the project: one of its
// eggs runs on a host that is gone or not listed, or has replicas unplaced
// while a host is live.
func (s *States) NeedsPlacing(recs []*resource.Deployed, hosts []placement.Host, now time.Time) bool {
	class := make(map[string]string, len(hosts))
	anyLive := false
	for _, h := range hosts {
		class[h.ID] = s.HostClass(h, now)
		anyLive = anyLive || class[h.ID] == "live"
	}
	for _, r := range recs {
		if r.Type != resource.Egg || r.Pending {
			continue
		}
		if resource.Int(r.Outputs["unplaced"]) > 0 && anyLive {
			return true
		}
		for _, h := range HostsOf(r.Outputs) {
			if c, ok := class[h]; !ok || c == "gone" {
				return true
			}
		}
	}
	return false
}

func checkEgg(rec *resource.Deployed) error {
	switch {
	case rec == nil || rec.Type != resource.Egg:
		return errors.New("not an egg")
	case rec.Pending:
		return fmt.Errorf("egg %s was never created: apply the project first", rec.Name)
	}
	return nil
}

// eggsInOrder returns the deployed eggs, each after the eggs it depends on
// (by the parents recorded), ties by name.
func eggsInOrder(recs []*resource.Deployed) []*resource.Deployed {
	byKey := map[string]*resource.Deployed{}
	for _, r := range recs {
		if r.Type == resource.Egg && !r.Pending {
			byKey[r.Key()] = r
		}
	}
	var out []*resource.Deployed
	done := map[string]bool{}
	var visit func(key string, depth int)
	visit = func(key string, depth int) {
		r, ok := byKey[key]
		if !ok || done[key] || depth > len(byKey) { // depth: a recorded cycle cannot loop forever
			return
		}
		done[key] = true
		for _, p := range slices.Sorted(slices.Values(r.Parents)) {
			visit(p, depth+1)
		}
		out = append(out, r)
	}
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		visit(key, 0)
	}
	return out
}
