// Package compose runs an existing Docker Compose project on Hatchery: it
// loads one or more compose.yaml files with compose-go, the reference
// implementation of the Compose specification (interpolation, .env,
// env_file, profiles, extends, include, several -f merged in order,
// COMPOSE_PROJECT_NAME and name:), and maps the result to a spec.Project.
//
// The mapping builds a spec.Project, writes it with spec.Marshal (the
// hatch.yaml that `hatch convert` prints) and parses that text with
// spec.Parse. So a Compose project maps to exactly the resources of its
// converted hatch.yaml, and gets every check a hatch.yaml gets; the
// diagnostics of that parse are moved to the lines of the Compose settings
// they come from.
//
// # What maps to what
//
// Services become eggs, named volumes volumes, networks networks, secrets
// secrets (file: or environment:). Per service: image; build (context,
// dockerfile, args, target); command and entrypoint; environment and
// env_file; healthcheck, as the container's Docker HEALTHCHECK with Docker's
// defaults for what it leaves out (30s interval and timeout, 3 retries);
// deploy.replicas or scale; deploy.update_config (parallelism as max_surge,
// 0 being all at once; order; monitor as min_ready; failure_action: rollback
// as auto_revert); deploy.resources.limits or cpus, mem_limit, pids_limit;
// deploy.placement.constraints of the form node.hostname == host;
// stop_grace_period, stop_signal, user, working_dir, read_only, cap_add,
// cap_drop, tmpfs (and tmpfs mounts), labels; volumes (named, and bind
// mounts with spec's warning); ports with a published port, served by the
// agent's proxy so several replicas and rolls work; secrets, mounted at
// /run/secrets/<name>; networks in Compose's order (priority, then name),
// with their aliases; depends_on with its conditions (service_started,
// service_healthy, service_completed_successfully); restart and
// deploy.restart_policy ("no" and none make a one-shot job).
//
// The egg's port (where routes, tcp health checks and ${x.address} point)
// is the first port's target, else the first exposed port. A service
// another waits to complete (service_completed_successfully) and that says
// nothing of restarts is a one-shot job, since Compose never restarts it.
// With no update_config.order, an egg rolls start-first (stop-first with a
// volume), Hatchery's default: the zero-downtime roll Compose lacks.
//
// An x-hatch extension on a service holds what Compose cannot say:
//
//	x-hatch:
//	  routes: [shop.localhost, api.localhost/v1]  # sent to the egg by the ingress
//	  port: 8080                                  # the port it listens on
//	  schedule: {cron: "0 3 * * *", timezone: Europe/Berlin}  # or {every: 15m}
//
// A route may be an object, {host: shop.example.com, tls: auto | off, hsts:
// true}, as in hatch.yaml; a certificate of the user's own (tls: {cert, key}
// from secrets) is given in hatch.yaml. A schedule is hatch.yaml's schedule
// block (cron, timezone, every, concurrency, timeout, starting_deadline,
// keep_runs), checked alike: the service becomes a job run at each tick, with
// no replica between ticks (a scheduled service without deploy.replicas or
// scale has none; with them, or with ports, a healthcheck or routes, it is
// refused).
//
// An x-hatch extension on a top-level volume holds its backup policy,
// hatch.yaml's volumes.<name>.backup block, checked alike:
//
//	volumes:
//	  data:
//	    x-hatch:
//	      backup: {schedule: {every: 6h}, keep: 14, before: [sync], consistency: hooks}
//
// # References
//
// The strings handed to the container (environment, command, entrypoint,
// healthcheck.test) may reference outputs with Compose's escape for a literal
// "${": $${db.address}, $${secret.api_key}, $${volume.data.host}. Only what
// names a service, secret, volume or network of the file is a reference; any
// other ${...} stays literal text.
//
// # Names
//
// Service names become egg names: lower case, "_" and "." as "-" (my_db is
// egg my-db); the original name stays an alias of the egg, as do its
// container_name and networks' aliases, so that the application's
// configuration keeps working. Volume, network and secret names are
// lower-cased with "." as "-". Names that collide once mapped, or that
// cannot be mapped, are errors.
//
// # Warnings
//
// Nothing is dropped silently. The supported list of attributes is
// fail-closed: every other attribute of the files gets one warning naming
// its service (or volume, network, secret) and its key; so do values that
// Hatchery approximates (restart: on-failure:3 loses its count, a port's
// host address is ignored, a secret mounted elsewhere than
// /run/secrets/<name>). Options.Strict turns every warning into an error.
package compose
