// Package provider holds the five resource types the graph reconciler
// applies (egg, volume, network, secret, route) as its providers, over the
// hosts' desired states that package desired computes: each provider decodes
// nothing it does not need, hands the resource to desired.States and reports
// the outputs package inputs declares for its kind.
//
// # The resource types (inputs as package spec documents them)
//
//   - egg: placed, and its workloads written, by desired.States.PlaceEgg.
//     Outputs: address ("<egg>:<port>": the name its relays carry on the
//     networks of its consumers), hosts (host IDs, sorted), and, for status
//     and the control plane, what package desired documents (revision,
//     unplaced, waiting, previous). An update that changes the spec keeps the
//     inputs before it as previous: what auto-revert puts back. Ready:
//     healthy or completed, as desired.States.EggReady decides.
//   - volume: its host is chosen once, at create, or adopted from the host
//     that already lists it (a retry, or a volume re-added to the file).
//     Outputs: name (its name in the project file: the Docker name is per
//     host), host. Removing it from the file keeps it (an event says it is
//     retained); only a Registry made with Options.DeleteVolumes marks it for
//     deletion.
//   - network: output name (its name in the project file); agents create a
//     network on the hosts whose workloads join it and prune it after.
//   - secret: its value is staged sealed (StageSecret) when the plan is made,
//     keyed by a keyed hash of the value that its inputs carry as
//     "fingerprint". Output handle: "hatch-secret:<name>:<id>:<fingerprint>"
//     (desired.SecretHandle). Eggs carry handles in their inputs and spec
//     hashes, so a new value rolls exactly the eggs that use it; the value
//     itself is put only into the workloads of those eggs.
//   - route: attached to its egg's workloads on every host running it
//     (desired.States.AttachRoute); no outputs. A route served with
//     contract.TLSAuto kicks the ACME client (Deps.OnTLSAuto).
//
// Every Create adopts what an earlier attempt left, so a retry, or an apply
// re-run after the server died, duplicates nothing.
package provider
