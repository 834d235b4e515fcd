// Package storetest holds the conformance suites every store implementation
// must pass: one per interface of package store, and one for the reconciler's
// ResourceStorage. They use nothing but those interfaces, so the SQLite store
// and the PostgreSQL store run the very same checks.
//
// Each suite takes an open function that returns a new, empty store; the
// store is closed by the implementation's own t.Cleanup. Times given to a
// store are whole milliseconds, the precision every implementation keeps.
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

// ResourceStorage has the methods of the reconciler's ResourceStorage, which
// every store implements (the implementations assert it against the
// reconciler's own type).
type ResourceStorage interface {
	PutResource(ctx context.Context, project string, r *resource.Deployed) error
	DeleteResource(ctx context.Context, project string, r *resource.Deployed) error
	ListResources(ctx context.Context, project string) ([]*resource.Deployed, error)
}

// Store is everything the suites exercise.
type Store interface {
	ResourceStorage
	store.Liveness
	store.Statuses
	store.DesiredStates
	store.Events
	store.BlobRetention
	store.ApplyHistory
	store.Projects
	store.AdminTokens
	store.JoinTokens
	store.Members
	store.HostCapacities
	store.Runs
	store.ScheduleStates
	store.VolumeTasks
	store.RegistryLogins
}

// Open returns a new, empty store for one test.
type Open func(t *testing.T) Store

// Run runs every suite.
func Run(t *testing.T, open Open) {
	t.Run("ResourceStorage", func(t *testing.T) { RunResourceStorage(t, open) })
	t.Run("Liveness", func(t *testing.T) { RunLiveness(t, open) })
	t.Run("Statuses", func(t *testing.T) { RunStatuses(t, open) })
	t.Run("DesiredStates", func(t *testing.T) { RunDesiredStates(t, open) })
	t.Run("DesiredWrites", func(t *testing.T) { RunDesiredWrites(t, open) })
	t.Run("Events", func(t *testing.T) { RunEvents(t, open) })
	t.Run("BlobRetention", func(t *testing.T) { RunBlobRetention(t, open) })
	t.Run("ApplyHistory", func(t *testing.T) { RunApplyHistory(t, open) })
	t.Run("Projects", func(t *testing.T) { RunProjects(t, open) })
	t.Run("Tokens", func(t *testing.T) { RunTokens(t, open) })
	t.Run("JoinTokens", func(t *testing.T) { RunJoinTokens(t, open) })
	t.Run("HostIdentities", func(t *testing.T) { RunHostIdentities(t, open) })
	t.Run("HostCapacities", func(t *testing.T) { RunHostCapacities(t, open) })
	t.Run("Actors", func(t *testing.T) { RunActors(t, open) })
	t.Run("Runs", func(t *testing.T) { RunRuns(t, open) })
	t.Run("RegistryLogins", func(t *testing.T) { RunRegistryLogins(t, open) })
	t.Run("VolumeTasks", func(t *testing.T) { RunVolumeTasks(t, open) })
}

// t0 is a fixed starting time with whole milliseconds.
var t0 = time.UnixMilli(1_700_000_000_000).UTC()

func ctx(t *testing.T) context.Context { return t.Context() }

// eventsSince lists every event after seq.
func eventsSince(t *testing.T, s store.Events, seq int64) []store.Event {
	t.Helper()
	evs, err := s.ListEvents(ctx(t), seq, 1000)
	if err != nil {
		t.Fatalf("ListEvents: %v", err)
	}
	return evs
}

// lastSeq returns the Seq of the newest event, 0 if none.
func lastSeq(t *testing.T, s store.Events) int64 {
	t.Helper()
	evs := eventsSince(t, s, 0)
	if len(evs) == 0 {
		return 0
	}
	return evs[len(evs)-1].Seq
}

// types lists the types of events, in order.
func types(evs []store.Event) []store.EventType {
	out := make([]store.EventType, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// closedWithin reports whether ch is closed within d.
func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}
