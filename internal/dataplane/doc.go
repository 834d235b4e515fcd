// Package dataplane gives a host's data plane a life of its own, apart from
// the agent: the ingress (HTTP, HTTPS and admin listeners, published ports,
// relay sockets) and the mesh node through which it reaches peers and serves
// their streams run in a process of their own (`hatch dataplane`, started by
// the agent), which the agent feeds over a Unix socket in its data directory
// (Client). That process keeps serving its last table while no agent is
// connected, so an agent that crashes or restarts fails no request: the next
// agent adopts it (Ensure).
//
// An agent restarted on another binary upgrades the data plane in place: the
// new process asks the old one for its listening sockets (passed as file
// descriptors over the Unix socket, with the last table, problem and peers),
// serves on them, says it is ready, and only then does the old one stop
// accepting and finish its requests in flight. A listening socket never
// closes, so no connection is refused.
//
// Invariants: one data plane per data directory (a flock on
// dataplane.lock, handed on with the listeners); the control socket is 0600
// in the agent's private data directory, since it carries the table with
// its TLS keys; a data plane never drops the table it serves unless an
// agent sends another.
package dataplane
