package reconciler

import (
	"errors"
	"fmt"
	"time"
)

// Action is what happened, or is planned to happen, to one resource.
type Action string

const (
	ActionCreate    Action = "create"
	ActionUpdate    Action = "update"
	ActionDelete    Action = "delete"
	ActionUnchanged Action = "unchanged"
	// ActionSkipped: not attempted, because something it needs failed, or
	// (for deletes) because anything failed, or because the context ended.
	ActionSkipped Action = "skipped"
	// ActionFailed: attempted, and failed after retries.
	ActionFailed Action = "failed"
)

// Result is the outcome of one Reconcile.
type Result struct {
	Project string
	// Resources lists every resource the run dealt with: the desired ones
	// parents first (ties by key), then the deployed ones no longer wanted,
	// children first.
	Resources []ResourceResult
	Duration  time.Duration
}

// ResourceResult is what happened to one resource.
type ResourceResult struct {
	Key string // "type/name"
	ID  string // the deployed ID; for a failed create, the ID it was given
	// Action is create, update, delete or unchanged on success, else failed
	// or skipped.
	Action Action
	// Planned is the create, update or delete a failed or skipped resource
	// was going to make, when it had been decided.
	Planned Action
	// Changed lists, for an update, the top-level inputs that differed
	// ("source" for the source blob), sorted.
	Changed []string
	// Attempts counts the provider operation's attempts (0 if none ran).
	Attempts int
	// Duration runs from the first attempt's start to the last one's end,
	// backoff delays included; readiness waits before it are not.
	Duration time.Duration
	// Err says why a resource failed or was skipped.
	Err error
}

// Count returns how many resources ended with the action.
func (r Result) Count(a Action) int {
	n := 0
	for _, rr := range r.Resources {
		if rr.Action == a {
			n++
		}
	}
	return n
}

// Get returns the result of the resource with the key.
func (r Result) Get(key string) (ResourceResult, bool) {
	for _, rr := range r.Resources {
		if rr.Key == key {
			return rr, true
		}
	}
	return ResourceResult{}, false
}

// err summarises a run that did not fully succeed: every failure, or, if
// nothing failed but something was skipped (a cancel before it started), the
// first reason to skip.
func (r Result) err() error {
	var failed []error
	var firstSkip error
	for _, rr := range r.Resources {
		switch rr.Action {
		case ActionFailed:
			failed = append(failed, rr.Err)
		case ActionSkipped:
			if firstSkip == nil {
				firstSkip = rr.Err
			}
		}
	}
	if len(failed) == 0 && firstSkip == nil {
		return nil
	}
	if len(failed) == 0 {
		failed = append(failed, firstSkip)
	}
	return fmt.Errorf("reconcile %s: %d failed, %d skipped: %w",
		r.Project, r.Count(ActionFailed), r.Count(ActionSkipped), errors.Join(failed...))
}
