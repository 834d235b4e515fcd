package compose

import (
	"fmt"
	"strings"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/tree"
)

// supported lists every Compose attribute the mapping reads. compose-go
// reports each attribute of the loaded files that matches none of them (and
// is not an x- extension), once, without descending into it: that is the one
// warning per unsupported key. The list is fail-closed: an attribute Compose
// gains later is reported until the mapping reads it.
//
// Attributes listed here whose value may still be unsupported (restart:
// unless-stopped is fine, on-failure:3 loses its count; a port with a host
// address) are judged by the mapping, which warns about the value.
var supported = []tree.Path{
	"name",

	"services.*.image",
	"services.*.pull_policy",
	"services.*.build.context",
	"services.*.build.dockerfile",
	"services.*.build.args.*",
	"services.*.build.target",
	"services.*.command",
	"services.*.entrypoint",
	"services.*.environment.*",
	"services.*.env_file.[].path",
	"services.*.env_file.[].required",
	"services.*.env_file.[].format",
	"services.*.healthcheck.test",
	"services.*.healthcheck.interval",
	"services.*.healthcheck.timeout",
	"services.*.healthcheck.start_period",
	"services.*.healthcheck.retries",
	"services.*.healthcheck.disable",
	"services.*.scale",
	"services.*.deploy.mode",
	"services.*.deploy.replicas",
	"services.*.deploy.update_config.parallelism",
	"services.*.deploy.update_config.order",
	"services.*.deploy.update_config.monitor",
	"services.*.deploy.update_config.failure_action",
	"services.*.deploy.resources.limits.cpus",
	"services.*.deploy.resources.limits.memory",
	"services.*.deploy.resources.limits.pids",
	"services.*.deploy.placement.constraints",
	"services.*.deploy.restart_policy.condition",
	"services.*.restart",
	"services.*.cpus",
	"services.*.mem_limit",
	"services.*.pids_limit",
	"services.*.stop_grace_period",
	"services.*.stop_signal",
	"services.*.user",
	"services.*.working_dir",
	"services.*.read_only",
	"services.*.cap_add",
	"services.*.cap_drop",
	"services.*.tmpfs",
	"services.*.labels.*",
	"services.*.container_name",
	"services.*.expose",
	"services.*.ports.[].target",
	"services.*.ports.[].published",
	"services.*.ports.[].protocol",
	"services.*.ports.[].mode",
	"services.*.ports.[].host_ip",
	"services.*.volumes.[].type",
	"services.*.volumes.[].source",
	"services.*.volumes.[].target",
	"services.*.volumes.[].read_only",
	"services.*.volumes.[].volume",
	"services.*.volumes.[].bind",
	"services.*.volumes.[].bind.create_host_path",
	"services.*.volumes.[].tmpfs",
	"services.*.secrets.[].source",
	"services.*.secrets.[].target",
	"services.*.networks.*",
	"services.*.networks.*.aliases",
	"services.*.depends_on.*.condition",
	"services.*.depends_on.*.required",
	"services.*.profiles",

	"volumes.*",
	"volumes.*.labels.*",
	"volumes.*.external",
	"networks.*",
	"networks.*.internal",
	"networks.*.labels.*",
	"networks.*.external",
	"secrets.*",
	"secrets.*.file",
	"secrets.*.environment",
	"secrets.*.external",
}

// hints say why an attribute is not needed, or what Hatchery does instead,
// keyed by the attribute's path below the service (or the top-level object).
var hints = map[string]string{
	"hostname":                               "the container's hostname is Docker's; other services reach it by its service name",
	"network_mode":                           "an egg is on its project's networks",
	"links":                                  "services reach each other by their names and aliases on their networks",
	"logging":                                "containers log to the Docker host's default log driver",
	"healthcheck.start_interval":             "Hatchery checks a container every 250 ms until it first passes",
	"deploy.update_config.delay":             "Hatchery rolls the next replica as soon as the previous one is healthy",
	"deploy.update_config.max_failure_ratio": "one replacement failing its health check fails the rollout",
	"deploy.rollback_config":                 "with update_config.failure_action: rollback, a failed rollout puts the previous spec back",
	"deploy.resources.reservations":          "Hatchery places replicas by their limits",
	"deploy.placement.preferences":           "Hatchery spreads replicas over the hosts",
	"deploy.restart_policy.max_attempts":     "Hatchery restarts a crashed container with a back-off, without a limit",
	"deploy.restart_policy.delay":            "Hatchery restarts a crashed container with a back-off",
	"deploy.restart_policy.window":           "Hatchery restarts a crashed container with a back-off",
	"depends_on.*.restart":                   "a dependent is not restarted when what it depends on is",
	"volumes[].volume.nocopy":                "a new volume starts empty",
	"name":                                   "Hatchery names what it creates itself",
	"driver":                                 "Hatchery creates it with Docker's default driver",
	"driver_opts":                            "Hatchery creates it with Docker's default driver",
}

// unsupportedWarnings turns compose-go's findings into one warning each,
// naming the service (or volume, network, secret) and the key. Findings
// under a service that is not part of the project (another profile's) are
// dropped: that service is not deployed.
func (m *mapper) unsupportedWarnings(findings []loader.UnsupportedAttribute) {
	for _, f := range findings {
		parts := pathParts(f.Path)
		kind, owner, key := describePath(parts)
		if kind == "service" {
			if _, active := m.cp.Services[owner]; !active {
				continue
			}
		}
		msg := fmt.Sprintf("%s: not supported by Hatchery, ignored", key)
		if owner != "" {
			msg = fmt.Sprintf("%s %q %s", kind, owner, msg)
		}
		if hint := hintFor(key); hint != "" {
			msg += " (" + hint + ")"
		}
		m.warn(parts, "%s", msg)
	}
}

// describePath splits a path into what it belongs to and the key within:
// services.web.deploy.mode is service "web", key "deploy.mode".
func describePath(parts []string) (kind, owner, key string) {
	kinds := map[string]string{"services": "service", "volumes": "volume", "networks": "network", "secrets": "secret"}
	if k, ok := kinds[parts[0]]; ok && len(parts) > 2 {
		return k, parts[1], joinKey(parts[2:])
	}
	return "", "", joinKey(parts)
}

// hintFor finds the hint of a key, trying it with each level generalised.
func hintFor(key string) string {
	if h, ok := hints[key]; ok {
		return h
	}
	parts := strings.Split(key, ".")
	for i := range parts {
		generic := append(append(append([]string{}, parts[:i]...), "*"), parts[i+1:]...)
		if h, ok := hints[strings.Join(generic, ".")]; ok {
			return h
		}
	}
	return ""
}

// pathParts splits a compose-go path into its keys, with the dots that were
// in keys (compose-go replaces them) put back.
func pathParts(p tree.Path) []string {
	parts := p.Parts()
	for i, part := range parts {
		parts[i] = tree.Path(part).String()
	}
	return parts
}

// joinKey writes keys the way a user reads them: deploy.mode, volumes[].bind.
func joinKey(parts []string) string {
	return strings.ReplaceAll(strings.Join(parts, "."), ".[]", "[]")
}
