package docker

import (
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

// SecretMountDir is where secret files appear in a container, as in Compose.
const SecretMountDir = "/run/secrets"

// createPlan is everything needed to create one container: the
// ContainerCreate arguments and, because API 1.41 creates a container on one
// network only, the networks to connect it to before it starts.
type createPlan struct {
	name    string
	config  *container.Config
	host    *container.HostConfig
	network *network.NetworkingConfig
	connect []connection
}

// connection is one NetworkConnect before start.
type connection struct {
	network string
	aliases []string
}

// planCreate maps a start request onto Docker's container configuration. It
// is pure: secretFiles maps each secret's name to the host file holding it,
// and labels are the container's full labels.
func planCreate(req containers.StartRequest, imageRef, name string, labels map[string]string, secretFiles map[string]string) createPlan {
	w := req.Spec
	cfg := &container.Config{
		Image:       imageRef,
		Cmd:         w.Command,
		Entrypoint:  w.Entrypoint,
		User:        w.User,
		WorkingDir:  w.WorkingDir,
		Env:         envList(w.Env, w.Secrets),
		Labels:      labels,
		StopSignal:  w.StopSignal,
		StopTimeout: ceilSeconds(w.EffectiveStopTimeout()),
		Healthcheck: dockerHealthcheck(w.Health),
	}
	host := &container.HostConfig{
		// The agent restarts containers itself, with its crash-loop back-off.
		RestartPolicy:  container.RestartPolicy{Name: container.RestartPolicyDisabled},
		ReadonlyRootfs: w.ReadOnly,
		CapAdd:         w.CapAdd,
		CapDrop:        w.CapDrop,
		SecurityOpt:    []string{"no-new-privileges:true"},
		Resources: container.Resources{
			Memory:   w.Resources.MemoryBytes,
			NanoCPUs: w.Resources.NanoCPUs,
		},
	}
	if w.Resources.PIDs > 0 {
		pids := w.Resources.PIDs
		host.Resources.PidsLimit = &pids
	}
	if len(w.Tmpfs) > 0 {
		host.Tmpfs = make(map[string]string, len(w.Tmpfs))
		for _, t := range w.Tmpfs {
			// "path" or "path:options", as in Compose; Docker's default
			// mode is 1777, like /tmp.
			p, opts, _ := strings.Cut(t, ":")
			host.Tmpfs[p] = opts
		}
	}
	for _, v := range w.Volumes {
		host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeVolume, Source: v.DockerName, Target: v.Target, ReadOnly: v.ReadOnly})
	}
	for _, b := range w.Binds {
		host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeBind, Source: b.Source, Target: b.Target, ReadOnly: b.ReadOnly})
	}
	for _, s := range w.Secrets {
		host.Mounts = append(host.Mounts, mount.Mount{
			Type: mount.TypeBind, Source: secretFiles[s.Name], Target: path.Join(SecretMountDir, s.Name), ReadOnly: true,
		})
	}

	plan := createPlan{name: name, config: cfg, host: host}
	if len(w.Networks) > 0 {
		aliases := aliasesOf(w)
		host.NetworkMode = container.NetworkMode(w.Networks[0])
		plan.network = &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
			w.Networks[0]: {Aliases: aliases},
		}}
		for _, n := range w.Networks[1:] {
			plan.connect = append(plan.connect, connection{network: n, aliases: aliases})
		}
	}
	return plan
}

// aliasesOf returns the DNS names the workload's containers carry on their
// networks: its NetworkAliases, each once, and nothing else. An egg's name
// and aliases are carried by its relays only (the agent gives them
// NetworkAliases): a replica carrying them too would be found by Docker's
// DNS beside the relay, booting or draining, bypassing the agent's choice.
// Every container is still reached by its own unique name.
func aliasesOf(w contract.WorkloadSpec) []string {
	var out []string
	for _, a := range w.NetworkAliases {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// envList returns the environment as Docker wants it, sorted so that equal
// maps give equal configurations. A secret used in a value is carried there by
// its handle (what the spec hash and every record see); only here, on its way
// into the container, does the handle become the value.
func envList(env map[string]string, secrets []contract.SecretFile) []string {
	if len(env) == 0 {
		return nil
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		for _, s := range secrets {
			if s.Handle != "" {
				v = strings.ReplaceAll(v, s.Handle, string(s.Value))
			}
		}
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// dockerHealthcheck returns the Docker HEALTHCHECK for a spec's cmd check;
// nil (the image's own, if any) otherwise. A cmd without Docker's "CMD",
// "CMD-SHELL" or "NONE" marker is taken as the exec form.
func dockerHealthcheck(h contract.HealthCheck) *container.HealthConfig {
	if len(h.Cmd) == 0 {
		return nil
	}
	test := h.Cmd
	switch h.Cmd[0] {
	case "CMD", "CMD-SHELL", "NONE":
	default:
		test = append([]string{"CMD"}, h.Cmd...)
	}
	return &container.HealthConfig{
		Test:        test,
		Interval:    h.Interval,
		Timeout:     h.Timeout,
		StartPeriod: h.StartPeriod,
		Retries:     h.Retries,
	}
}

// ceilSeconds returns d in whole seconds, rounded up (Docker's stop timeout
// is in seconds; rounding down could cut a grace period to nothing).
func ceilSeconds(d time.Duration) *int {
	s := int((d + time.Second - 1) / time.Second)
	return &s
}
