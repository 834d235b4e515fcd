// Package reconciler reconciles resources in a graph.
//
// # Steps
//
// The reconciliation process consists at a high level of 3 steps.
//
// Get existing resources. Existing resources for the project in the current
// namespace are listed (the project string is "<namespace>/<project>", so the
// same project in two namespaces never meets). Any previously created
// resources are returned.
//
// Create or update resources. The desired graph is walked in the order
// specified by the dependencies. Each resource encountered has its inputs
// resolved from its parents' current outputs, then is compared to the existing
// resource of the same type and name:
//   - When an exact match is found, the walk continues to the next resource,
//     with the output passed to it. No provider is called.
//   - If an existing resource with the same type and name exists but the input
//     values do not match, the resource is updated in place, keeping its ID.
//   - When no resource exists for the type-name combination, it is created
//     with an ID from the IDGenerator.
//
// Delete resources. Resources that were not matched in the create/update phase
// are cleaned up, children before parents (by the parents recorded on each
// deployed resource, since the desired graph no longer holds them). Thus,
// resources are always created in the desired state before anything gets
// removed, and if anything failed nothing is removed at all.
//
// # Invariants
//
//   - No duplicates after a crash. Before a create, a pending record carrying
//     the new ID is persisted; providers create idempotently by that ID, so a
//     re-run after a crash adopts the object instead of making a second one.
//   - Nothing is lost. Each create, update and delete is persisted the moment
//     it succeeds, even if the context was cancelled meanwhile; a re-run
//     finishes the job, and applying the same graph twice makes no provider
//     operation the second time.
//   - Bad graphs are refused before anything runs (see ErrInvalidGraph).
//
// # Concurrency
//
// When possible, changes are performed concurrently. A resource starts the
// moment all its parents succeeded (and, for a dependency with a readiness
// condition, the parent is ready), with no level-by-level barrier:
//
//	A --> C      A and B execute concurrently; when both have been executed
//	B --/        (without error), C is executed.
//
//	A -> B -> D  A is executed, then B and C concurrently, then D.
//	 \-> C --/
//
// At most Concurrency provider calls are in flight at any instant. When more
// resources are ready than there are free slots, the one with the longest chain
// of dependents still to run starts first (critical-path priority), so a long
// chain is not starved by a crowd of independent leaves. A failure marks the
// failed resource's descendants skipped; independent branches carry on.
//
// # Retries
//
// All operations are retried with exponential backoff. If a non-retryable
// error occurs, the provider should wrap the returned error with
// backoff.Permanent(err). A resource waiting out a backoff delay, or waiting for
// a parent to become ready, does not hold a concurrency slot. Cancelling the
// context stops retries and waits promptly: nothing new starts, and the
// operations already running (providers should honour the context) are
// waited for and, if they succeeded, recorded.
package reconciler
