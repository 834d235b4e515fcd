// Package provider turns a project's resources into per-host desired state:
// it holds the five resource types the graph reconciler applies (egg, volume,
// network, secret, route) and the operations the control plane runs on eggs
// outside an apply (rollout restart, auto-revert, rescheduling), all over one
// Set that owns the hosts' desired states.
//
// # Desired state
//
// Each host's desired state (contract.DesiredState) is the whole truth for its
// agent. Every change to desired states is a read-modify-write of all hosts
// under the Set's lock: load the fleet and every host's state, edit, then
// write the hosts whose content changed (hosts gaining replicas first, so a
// move starts the new before stopping the old). An unchanged state is never
// rewritten, so re-running an operation that already landed wakes no agent.
// (Several control-plane servers sharing a PostgreSQL store will need that
// read-modify-write in one transaction instead of a process lock.)
//
// Each write also derives, for every host, what does not belong to one egg:
// Services (every egg of the cluster with routes or published ports; the
// eggs with a port of a project that its workloads share a network with,
// reached by name there through relays; the eggs its workloads use,
// WorkloadSpec.Uses) and Peers (the valid host set,
// contract.ValidPeers, with the mesh addresses hosts reported). SyncPeers
// derives them again when only the host set changed.
//
// # The resource types (inputs as package spec documents them)
//
//   - egg: asks the scheduler where its replicas go (keeping every slot that is
//     still valid: an unchanged egg moves nothing; the eggs it uses do not
//     constrain it) and writes one workload per host holding slots, with
//     contract.SpecHash deciding what rolls. Outputs:
//     address ("<egg>:<port>": the name its relays carry on the networks of
//     its consumers, see servicesByHost), hosts
//     (host IDs, sorted), and, for status and the control plane: revision
//     (bumped by rollout restart), unplaced and waiting (why replicas are not
//     placed), previous (the inputs before the last update that changed the
//     spec: what auto-revert puts back). Ready: healthy when every replica is
//     running healthy at the current spec hash; completed when every replica
//     of a one-shot job exited 0 at it. A failed rollout or job makes the
//     condition unreachable (a permanent error).
//   - volume: its host is chosen once, at create, from its egg's placement and
//     resources (placement.ChooseVolumeHost), or adopted from the host that
//     already lists it (a retry, or a volume re-added to the file), and listed
//     as kept in that host's desired state. Outputs: name (its name in the
//     project file: the Docker name is per host), host. Removing it from the
//     file keeps it (an event says it is retained); only a Registry made with
//     Options.DeleteVolumes marks it for deletion.
//   - network: output name (its name in the project file); agents create a
//     network on the hosts whose workloads join it and prune it after.
//   - secret: its value is staged sealed (StageSecret) when the plan is made,
//     keyed by a keyed hash of the value that its inputs carry as
//     "fingerprint". Output handle: "hatch-secret:<name>:<id>:<fingerprint>".
//     Eggs carry handles in their inputs and spec hashes, so a new value rolls
//     exactly the eggs that use it; the value itself is put only into the
//     workloads of those eggs (contract.SecretFile.Value, sealed at rest).
//   - route: attached to its egg's workloads on every host running it; the
//     egg carries its routes along when it moves. Routes and published ports
//     are claims on the whole cluster (every host's ingress serves them all):
//     one held by another project (or namespace) on any host is refused,
//     naming the holder; Preview refuses it at plan time already.
//
// Every Create adopts what an earlier attempt left (the workload of an egg is
// identified by namespace/project/egg, a volume by its name), so a retry, or
// an apply re-run after the server died, duplicates nothing.
package provider
