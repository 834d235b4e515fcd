// Package spec loads a project file (hatch.yaml) into a typed, defaulted and
// checked Project, and maps that Project to the reconciler's desired
// resources. It is the one place where the file format meets the engine, so
// its mapping is a contract: providers read the inputs described below, and
// the Compose loader (package compose) writes a compose.yaml as a hatch.yaml
// (Marshal) and parses it here, so it produces the same resources through
// the same Resources method.
//
// # Loading
//
// Parse reads the YAML at the node level so that every problem carries its
// file and line, and it collects every problem rather than stopping at the
// first: unknown fields (with the closest valid name), bad values (naming the
// field and how to write it), names defined twice or not at all, routes and
// published ports claimed twice, stateful eggs with several replicas, cycles
// (with their path). Problems that do not stop a deploy, such as a bind mount,
// are warnings. Parse does no I/O; CheckSources checks the files and
// variables the project reads at deploy time. A YAML syntax error keeps the
// parser's words, except the one a ${...} unquoted inside {...} or [...]
// causes, which says so and shows the quoted form (ExplainFlowReference).
//
// ${env.NAME} and ${env.NAME:-default} are substituted while loading, from
// Options.LookupEnv. References to outputs are translated to the canonical
// form of package resource and allowed only in the strings handed to the
// container (env, command, entrypoint, health.cmd), since the others must be
// understood before anything is deployed. "$$" is a literal "$", as in
// Compose. Every string of the model is held in the resource package's input
// encoding (a literal "${" is "$${"), so it can go into inputs as it is.
//
// notify: is a list of webhooks, each a URL (a JSON body) or {url, format:
// json|slack}: https, or http to a loopback address, checked at its line;
// errors show a URL's scheme and host only, since webhooks carry their
// token in the path or query. It is no resource: the CLI sends it with the
// plan (api.PlanRequest.Notify) and the apply record keeps it (package
// notify).
//
// # Resources
//
// Keys are "type/name". Inputs are JSON-compatible maps; durations are
// strings ("10s", "5m"), sizes are bytes, every list and map is present
// (empty rather than null), so that equal settings give equal inputs.
//
// egg/<name>, one per egg:
//
//	build        {context, dockerfile, args, target} or null. context is relative
//	             to the project file's directory (Project.Path finds it); the
//	             resource's Source is left empty: the CLI uploads the context and
//	             fills in the blob digest at apply time.
//	image        the image reference, "" with build.
//	pull         the pull policy: "" (digest, the default), "always" or
//	             "missing"; "" with build. The control plane adds digest,
//	             the tag's digest at plan, for the default policy.
//	replicas, command, entrypoint, user, working_dir, port, env, aliases,
//	restart, tmpfs, read_only, cap_add, cap_drop, labels, stop_signal,
//	stop_timeout: as written, defaulted (replicas 1, restart "always",
//	             stop_signal "SIGTERM", stop_timeout "10s"). env values may hold
//	             references, e.g. "postgres://app@${egg/db.address}/shop".
//	ports        [{published, target, protocol: "tcp"}].
//	health       {http, tcp, cmd, interval, timeout, start_period, retries} or
//	             null when the file has no health block (the agent then uses the
//	             image's HEALTHCHECK, else tcp on port, else "running"). Defaults:
//	             interval 5s, timeout 2s, start_period 0s, retries 3.
//	rollout      {order, max_surge: {count} or {percent}, min_ready, drain_timeout,
//	             progress_deadline, auto_revert}. order is "stop-first" for an egg
//	             with a volume, else "start-first"; max_surge defaults to
//	             {percent: 25} (Surge.Slots), drain_timeout to 10s,
//	             progress_deadline to 5m.
//	resources    {memory (bytes), cpus, pids}, 0 meaning no limit.
//	volumes      [{type: "volume"|"bind", source, target, read_only}]; a volume's
//	             source is ${volume/<name>.name}, a bind mount's an absolute path.
//	secrets      [{name, handle: ${secret/<name>.handle}, target: /run/secrets/<name>}].
//	networks     [${network/<name>.name}], in the file's order, the first being
//	             the one its address is on; [${network/default.name}] when the
//	             file lists none.
//	placement    {hosts: the user's host names (empty = any),
//	             volume, volume_host: a stateful egg's (first) volume and
//	             ${volume/<volume>.host}, else "" and ""}. These are the
//	             constraints of placement.Egg (Placement, Volume, VolumeHost).
//	             Records written before cross-host addressing also hold
//	             beside: [{egg, hosts}], which nothing reads any more.
//	schedule     omitted, or a scheduled egg's {cron, timezone, every,
//	             concurrency, timeout, starting_deadline, keep_runs} as
//	             written (durations canonical, unwritten fields omitted: their
//	             defaults are schedule.FromInputs's: concurrency forbid,
//	             starting_deadline the interval at most 1h, keep_runs 20, no
//	             timeout). A scheduled egg has replicas 0, no ports, health
//	             or routes: each tick runs one container of it (package
//	             schedule says what ticks, daylight-saving included).
//	uses         the eggs whose address it references, by name, sorted: plain
//	             names, so where they run constrains nothing; each host running
//	             the egg serves them to it under their names (relays).
//
// Routes are not part of an egg's inputs, so that changing a route never
// rolls the egg's containers.
//
// volume/<name>, one per entry of volumes: {labels, egg (the egg mounting it,
// "" if none), placement and resources copied from that egg}. They are copied,
// not referenced, because the volume is the egg's parent: its host is chosen
// first, then the egg follows it through placement.volume_host. A second
// volume of the same egg has placement.volume and volume_host set to the
// first one and its host, so that both land on one host.
// An egg mounts a volume through ${volume/<name>.name}, so it depends on it.
// backup, when the file has one, is its backup policy (inputs.VolumeBackup,
// checked by BackupErrors): a change of it updates the volume and no egg,
// since no egg input is copied from it.
//
// network/<name>, one per entry of networks:, plus network/default when an
// egg lists no network (a file may configure it as networks: {default: ...},
// as in Compose): {internal, labels}.
//
// secret/<name>, one per entry of secrets: {file} (relative to the project
// file's directory) or {env} (a variable of hatch's environment). The loader
// never reads the value; its output "handle" is opaque, and the value reaches
// only the hosts that need it.
//
// route/<host>[<path>], one per entry of an egg's routes (route/shop.localhost,
// route/api.localhost/v1): {host, path ("/" for the whole host), egg, port (the
// egg's port), upstream_timeout (from the object form of a route,
// {host: api.localhost/v1, upstream_timeout: 30s}; absent for the default),
// tls ("auto", "off", "secret", or absent for the server's default: auto
// for a public DNS name when the server has an ACME CA), cert and key (with
// tls: secret, ${secret/<name>.handle} of the secrets holding the PEM chain
// and key; from {tls: {cert: "${secret.crt}", key: "${secret.key}"}}), hsts
// (absent unless true), hosts: [${egg/<egg>.hosts}]}. It depends on its egg,
// and on the secrets of its certificate.
//
// The inputs are declared once, in package inputs (inputs.Egg, inputs.Volume,
// inputs.Network, inputs.Secret, inputs.Route), which the providers decode
// strictly once the references are resolved. A reference to a list output
// is written as an item of a list ([${egg/x.hosts}] above), which resolving
// splices, so the resolved inputs have the shape these types declare.
//
// # Dependencies
//
// Resources returns the explicit edges: depends_on (list form: condition
// created; map form: started = created, healthy, completed) and route -> egg.
// Every reference in inputs is an edge too, which graph.New derives: an egg
// depends on its volumes, networks and secrets, on the eggs whose outputs its
// env references, and a stateful egg on its volume's host.
package spec
