package desired

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/placement"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

// Egg is an egg as its hosts' desired states are computed from it: its
// identity, its typed inputs, and what is not an input (the source blob,
// the revision).
type Egg struct {
	namespace, project, name string
	in                       inputs.Egg
	source                   string // blob digest, if built from one
	revision                 int
}

// NewEgg decodes an egg's resolved inputs; inputs that do not fit are a
// permanent error.
func NewEgg(project, name string, resolved map[string]any, source string, revision int) (Egg, error) {
	ns, proj, err := resource.SplitProject(project)
	if err != nil {
		return Egg{}, backoff.Permanent(err)
	}
	in, err := decode[inputs.Egg](resource.Key(resource.Egg, name), resolved)
	if err != nil {
		return Egg{}, err
	}
	return Egg{namespace: ns, project: proj, name: name, in: in, source: source, revision: revision}, nil
}

func (e Egg) id() string { return contract.WorkloadID(e.namespace, e.project, e.name) }

// Scheduled reports whether the egg runs on a schedule (inputs.Schedule):
// it then has no long-running replicas, on any host.
func (e Egg) Scheduled() bool { return e.in.Schedule != nil }

// address is the egg's address output: its name (always one of its aliases on
// its networks) and port.
func (e Egg) address() string {
	if e.in.Port == 0 {
		return e.name
	}
	return e.name + ":" + strconv.Itoa(e.in.Port)
}

// schedulerEgg is the egg as the scheduler places it.
func (e Egg) schedulerEgg(current map[string]int) placement.Egg {
	egg := placement.Egg{
		Namespace: e.namespace, Project: e.project, Name: e.name,
		Replicas:   e.in.Replicas,
		PerReplica: request(e.in.Resources),
		Volume:     e.in.Placement.Volume,
		VolumeHost: e.in.Placement.VolumeHost,
		Placement:  e.in.Placement.Hosts,
		Current:    current,
	}
	return egg
}

// secrets returns the secrets the egg's containers get: those it mounts and
// those its env references (a secret used only in env still travels as a
// SecretFile, since that is the only place a value is carried, sealed), by
// name, each with its handle.
func (e Egg) secrets() []contract.SecretFile {
	byName := map[string]string{}
	for _, s := range e.in.Secrets {
		byName[s.Name] = s.Handle
	}
	for _, k := range slices.Sorted(maps.Keys(e.in.Env)) {
		for _, m := range handlePattern.FindAllStringSubmatch(e.in.Env[k], -1) {
			if _, ok := byName[m[1]]; !ok {
				byName[m[1]] = m[0]
			}
		}
	}
	out := make([]contract.SecretFile, 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		out = append(out, contract.SecretFile{Name: name, Handle: byName[name]})
	}
	return out
}

// handles are the secret handles whose values the egg's workloads carry:
// its secrets', and its registry login's password.
func (e Egg) handles() []contract.SecretFile {
	files := e.secrets()
	if a := e.in.PullAuth; a != nil {
		files = append(files, contract.SecretFile{Name: "password of registry " + a.Registry, Handle: a.Password})
	}
	return files
}

// workload returns what host runs of the egg: slots of it, with the Docker
// names its networks and volumes have there. values maps a secret handle to
// its value; a handle without one is an error unless values is nil (a
// preview, where only handles matter).
func (e Egg) workload(host string, slots int, values map[string]contract.SecretValue) (contract.WorkloadSpec, error) {
	in := e.in
	w := contract.WorkloadSpec{
		Namespace: e.namespace, Project: e.project, Egg: e.name,
		Image:      in.Image,
		Pull:       contract.PullPolicy(in.Pull),
		Replicas:   slots,
		Revision:   e.revision,
		Command:    in.Command,
		Entrypoint: in.Entrypoint,
		User:       in.User,
		WorkingDir: in.WorkingDir,
		Env:        map[string]string(in.Env),
		Port:       in.Port,
		Aliases:    in.Aliases,
		Uses:       in.Uses,
		Restart:    contract.RestartPolicy(in.Restart),
		Tmpfs:      in.Tmpfs,
		ReadOnly:   in.ReadOnly,
		CapAdd:     in.CapAdd,
		CapDrop:    in.CapDrop,
		Labels:     in.Labels,
		StopSignal: in.StopSignal,
		Resources: contract.Resources{
			MemoryBytes: in.Resources.Memory,
			NanoCPUs:    int64(math.Round(in.Resources.CPUs * 1e9)),
			PIDs:        in.Resources.Pids,
		},
	}
	var errs []error
	parse := func(field, s string) time.Duration {
		d, err := duration(field, s)
		if err != nil {
			errs = append(errs, err)
		}
		return d
	}
	if in.Digest != "" {
		// The digest the plan resolved: every host pulls these bytes.
		pinned, err := contract.PinImage(in.Image, in.Digest)
		if err != nil {
			errs = append(errs, err)
		}
		w.Image = pinned
	}
	w.StopTimeout = parse("stop_timeout", in.StopTimeout)
	w.Rollout = contract.Rollout{
		Order:            contract.RolloutOrder(in.Rollout.Order),
		MaxSurge:         in.Rollout.MaxSurge.Slots(slots),
		MinReady:         parse("rollout.min_ready", in.Rollout.MinReady),
		DrainTimeout:     parse("rollout.drain_timeout", in.Rollout.DrainTimeout),
		ProgressDeadline: parse("rollout.progress_deadline", in.Rollout.ProgressDeadline),
		AutoRevert:       in.Rollout.AutoRevert,
	}
	if b := in.Build; b != nil {
		w.BlobID = e.source
		w.Build = &contract.BuildSpec{Dockerfile: b.Dockerfile, Args: b.Args, Target: b.Target}
	}
	if h := in.Health; h != nil {
		w.Health = contract.HealthCheck{
			HTTP: h.HTTP, TCP: h.TCP, Cmd: h.Cmd, Retries: h.Retries,
			Interval:    parse("health.interval", h.Interval),
			Timeout:     parse("health.timeout", h.Timeout),
			StartPeriod: parse("health.start_period", h.StartPeriod),
		}
	}
	w.Ports = e.ports()
	for _, m := range in.Volumes {
		switch m.Type {
		case inputs.MountVolume:
			w.Fenced = w.Fenced || m.Fenced
			w.Volumes = append(w.Volumes, contract.VolumeMount{Name: m.Source, Target: m.Target, ReadOnly: m.ReadOnly,
				DockerName: contract.VolumeName(host, e.namespace, e.project, m.Source)})
		case inputs.MountBind:
			w.Binds = append(w.Binds, contract.BindMount{Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
		default:
			errs = append(errs, fmt.Errorf("volumes: mount type %q is neither volume nor bind", m.Type))
		}
	}
	for _, n := range in.Networks {
		w.Networks = append(w.Networks, contract.NetworkName(host, e.namespace, e.project, n))
	}
	if in.Port == 0 && len(w.Networks) > 0 {
		// No relay can carry an egg without a port (a relay listens on
		// it), so its replicas carry its names themselves, as before
		// relays: consumers on the same host still reach it by name.
		w.NetworkAliases = eggNames(e.name, in.Aliases)
	}
	w.Secrets = e.secrets()
	for i := range w.Secrets {
		if values == nil {
			continue
		}
		v, ok := values[w.Secrets[i].Handle]
		if !ok {
			errs = append(errs, fmt.Errorf("secret %s: no value for its handle", w.Secrets[i].Name))
		}
		w.Secrets[i].Value = v
	}
	if a := in.PullAuth; a != nil {
		w.PullAuth = &contract.RegistryAuth{Registry: a.Registry, Username: a.Username, Handle: a.Password}
		if v, ok := values[a.Password]; ok {
			w.PullAuth.Password = v
		} else if values != nil {
			errs = append(errs, fmt.Errorf("registry %s: no value for its password's handle", a.Registry))
		}
	}
	if len(errs) > 0 {
		return contract.WorkloadSpec{}, backoff.Permanent(fmt.Errorf("egg %s: %w", e.name, errors.Join(errs...)))
	}
	return w, nil
}

// ports are the egg's published ports, as its workloads carry them.
func (e Egg) ports() []contract.PublishedPort {
	var out []contract.PublishedPort
	for _, p := range e.in.Ports {
		out = append(out, contract.PublishedPort{HostPort: p.Published, ContainerPort: p.Target, Protocol: p.Protocol})
	}
	return out
}

// SpecHash is the egg's spec hash independent of any host: what changes it
// is what rolls the egg's containers everywhere.
func (e Egg) SpecHash() string {
	w, err := e.workload("", 1, nil)
	if err != nil {
		return ""
	}
	return contract.SpecHash(w)
}
