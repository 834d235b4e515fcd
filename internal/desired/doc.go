// Package desired computes every host's desired state (contract.DesiredState)
// from a project's deployed resources: where an egg's replicas go and the
// workload each host runs of it, the volumes kept on a host, the routes and
// certificates every host serves, and what each host derives from the whole
// fleet (Services, Peers). The providers of package provider call it for
// the reconciler; the control plane calls it directly for what it does on
// eggs outside an apply (rollout restart, auto-revert, rescheduling), for
// the plan's preview, and for the ACME client's certificates.
//
// # One read-modify-write
//
// Each host's desired state is the whole truth for its agent. Every change to
// desired states is a read-modify-write of all hosts under the States' lock:
// load the fleet and every host's state, edit, then write the hosts whose
// content changed (hosts gaining replicas first, so a move starts the new
// before stopping the old). An unchanged state is never rewritten, so
// re-running an operation that already landed wakes no agent. (Several
// control-plane servers sharing a PostgreSQL store will need that
// read-modify-write in one transaction instead of a process lock.)
//
// Each write also derives, for every host, what does not belong to one egg:
// Services (every egg of the cluster with routes or published ports; the
// eggs with a port of a project that its workloads share a network with,
// reached by name there through relays; the eggs its workloads use,
// WorkloadSpec.Uses) and Peers (the valid host set, contract.ValidPeers,
// with the mesh addresses hosts reported). SyncPeers derives them again when
// only the host set changed.
//
// # What each kind writes
//
//   - egg (PlaceEgg): the scheduler says where its replicas go (keeping every
//     slot that is still valid: an unchanged egg moves nothing; the eggs it
//     uses do not constrain it), and each host holding slots gets one
//     workload, with contract.SpecHash deciding what rolls. Its outputs
//     (read back by RevisionOf, PreviousOf and HostsOf) carry, beyond
//     those package inputs declares, what the control plane reads: revision
//     (bumped by RestartEgg), unplaced and waiting (why replicas are not
//     placed), previous (what Revert puts back). EggReady: healthy when every
//     replica is running healthy at the current spec hash; completed when
//     every replica of a one-shot job exited 0 at it; a failed rollout or job
//     makes the condition unreachable (a permanent error).
//   - volume (PlaceVolume): its host is chosen once, from its egg's placement
//     and resources (placement.ChooseVolumeHost), or adopted from the host
//     that already lists it, and listed as kept in that host's desired state;
//     RemoveVolume retains it or marks it for deletion.
//   - route (AttachRoute): attached to its egg's workloads on every host
//     running it; the egg carries its routes along when it moves. Routes and
//     published ports are claims on the whole cluster (every host's ingress
//     serves them all): one held by another project (or namespace) on any
//     host is refused with a *ConflictError naming the holder; Preview
//     refuses it at plan time already.
//   - runs (DeliverRuns, StopRuns, ReleaseRuns; the jobs service's): a run
//     of an egg goes into the state of the one host placement chooses for one
//     replica of it, with the egg's workload spec made for that host; a
//     stateful egg's replica on a host whose state holds a run of it stays
//     stopped (its --stop window), whoever places the egg meanwhile.
//   - secret: an egg's workloads carry the values of the secrets it uses
//     (contract.SecretFile.Value, sealed at rest), read by their handles
//     (SecretHandle).
//
// Placing adopts what an earlier attempt left (the workload of an egg is
// identified by namespace/project/egg, a volume by its name), so a retry, or
// an apply re-run after the server died, duplicates nothing.
package desired
