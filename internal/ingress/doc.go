// Package ingress is the reverse proxy every agent runs on its host: it sends
// HTTP requests (by Host and optional path prefix) and TCP connections (on
// published ports and relay sockets) to the healthy replicas of an egg, local
// first, else on another host through the mesh, and it lets the
// Docker adapter take a replica out of rotation and wait for its traffic to
// finish before the container is stopped. That ordering (out of the pool,
// drain, then stop) is what makes a roll or a scale-down lose no request.
//
// The agent drives it with four calls:
//
//   - Update(Table) replaces the routing table: eggs, their routes, published
//     ports, drain timeouts and backends with their health. It applies at once,
//     without a restart and without touching open connections.
//   - Drain(ctx, containerID) takes a backend out of the pool and returns once
//     its in-flight requests and connections have finished, or the egg's drain
//     timeout has passed. What is still open then is left to the container's
//     stop: its application closes each connection cleanly as it shuts down
//     (an HTTP server after the response in flight), which the ingress cannot
//     do for a TCP connection it does not understand.
//   - Gone(containerID) says the container died: it leaves the pool at once and
//     its connections that are still open are cut.
//   - ServeHTTP serves proxied requests (Start also listens on Config.HTTPAddr),
//     and AdminHandler serves /healthz and /metrics (Start listens on
//     Config.AdminAddr).
//
// Invariants:
//   - A backend receives new requests or connections only while the last
//     Update reported it healthy, it has not been drained since it was last
//     reported gone, and no dial to it failed in the last Config.EjectFor,
//     unless no other backend is left: then one ejected on a guess (a failed
//     dial, a peer without a healthy replica at that moment) is picked rather
//     than none, local first; never a frozen replica nor a dead peer.
//   - Among those, the one with the fewest in-flight requests and connections
//     is chosen; ties rotate. A remote backend (another host running the
//     egg, reached through Config.Peers) is chosen only when no local one
//     is available; the same rules eject it.
//   - Streams from peers (DialLocal) reach local backends only: a request
//     never travels from host to host more than once.
//   - Once Drain has taken a backend out, no new request or connection reaches
//     it (the check after reserving a slot closes the race with a concurrent
//     pick), and keep-alive connections to it are closed as soon as their
//     request finishes.
//   - A request that got no response from a backend is retried once on another
//     backend when that is safe: the dial failed (nothing was sent), or the
//     request has no body. Everything else gets a 502.
//   - A stateful egg (Egg.Stateful) whose last backend leaves the pool holds
//     what then finds no backend (requests, connections, streams from
//     peers) for at most Config.HoldTimeout from that moment, and sends it to
//     the first backend to join; what is still held then gets 503. The window
//     opens before the empty pool is published, so no request falls between.
//
// Per-request work is a map lookup, a scan of the egg's few backends, atomic
// counters and httputil.ReverseProxy; nothing is logged per request.
package ingress
