// Package agent is the host agent (`hatch agent`): it pulls this host's
// desired state from the control plane, keeps it on disk, converges the
// host's Docker containers towards it with converge.Converge, and reports
// what runs back to the control plane.
//
// The pieces, each a small named part of Agent:
//
//   - Join (client.go) trades a join token for a host identity over TLS pinned
//     to the CA fingerprint the token carries; the identity, host token and CA
//     are kept in the data directory, so later starts need only that.
//   - The poller (poll.go) long-polls the desired state, with jittered
//     back-off on errors; the loop caches every new state atomically before converging
//     towards it (mode 0600, secret values sealed with a key kept beside the
//     cache, the time of the write recorded; fromcache.go keeps the cache and
//     the holds a converge from it calls for).
//   - The loop converges, one converge at a time, when the desired state
//     changes, when Docker reports a container died or changed health, when a
//     task of the Docker adapter ends, and every ConvergeInterval. Triggers
//     that arrive during a converge coalesce into one more (Signal). A panic
//     in a converge is recovered, logged with its stack, and the loop goes on.
//   - The heartbeat (heartbeat.go) sends the latest status report every
//     HeartbeatInterval from its own goroutine, and at once after each
//     converge, so a slow or unreachable control plane never delays a
//     converge.
//   - Volume tasks (volumetasks*.go) back a volume up or restore one, each on
//     a goroutine of its own, through Docker's archive API on a never-started
//     helper container and the control plane's chunk routes (taskstore.go);
//     the converge begins them and reports them, the heartbeat carries their
//     progress.
//
// Invariants:
//   - An agent that has never received a desired state (none cached either)
//     changes nothing: it only observes and reports.
//   - When the control plane is unreachable, containers keep running and the
//     agent converges from its cache, also right after a restart; but until
//     the control plane first answers (or StaleCacheWait passes), never
//     against a container created after the cache was written: a cache whose
//     write failed must not roll the host back (converge.Hold). A write that
//     fails is retried, and reported, until it works.
//   - Crash history and failed-rollout markers (converge.History, with the
//     failing containers' last log lines) are persisted after every converge
//     that changed them, so a restarted agent neither forgets a crash loop
//     nor retries a failed rollout; running containers are adopted, never
//     recreated when up to date (converge's rules see to that).
//   - A volume task is begun at most once, ever: it is on disk as begun
//     before it begins, and one an earlier process began is reported failed,
//     never begun again nor reported done.
//   - Agent.Start launches every goroutine the agent owns and Agent.Close
//     stops and waits for all of them.
//   - New takes every dependency it uses (Config.Validate names a missing
//     one); the package assembles none of its neighbours. `hatch agent`
//     (internal/cli) wires the identity, the control-plane client, the
//     ingress, the Docker adapter and the agent, and closes them in reverse.
package agent
