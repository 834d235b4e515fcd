package contract

import "time"

// SpecHash returns the hash of everything in the workload that goes into its
// containers' configuration, so that a container labelled with a different hash
// needs replacing. It is the one definition of "needs a new container":
//
//   - in: identity, image or Blob and build settings, revision, command,
//     entrypoint, user, working directory, env values, aliases and networks,
//     mounts (volumes, binds, secret handles, tmpfs), read-only, capabilities,
//     labels, resource limits, stop signal and timeout, and a Docker
//     HEALTHCHECK (a Cmd health check, with its timings);
//   - out: replicas (scaling rolls nothing), port, published ports and routes
//     (served by the agent's proxy), agent-side probes (HTTP, TCP) and their
//     timings, the restart policy (applied by the agent), the rollout settings,
//     and secret values (their handle is in).
//
// TestSpecHashFields lists every field and says in or out.
func SpecHash(w WorkloadSpec) string {
	in := specHashInput{
		Namespace:   w.Namespace,
		Project:     w.Project,
		Egg:         w.Egg,
		BlobID:      w.BlobID,
		Image:       w.Image,
		Build:       w.Build,
		Revision:    w.Revision,
		Command:     w.Command,
		Entrypoint:  w.Entrypoint,
		User:        w.User,
		WorkingDir:  w.WorkingDir,
		Env:         w.Env,
		Aliases:     w.Aliases,
		Volumes:     w.Volumes,
		Binds:       w.Binds,
		Tmpfs:       w.Tmpfs,
		ReadOnly:    w.ReadOnly,
		CapAdd:      w.CapAdd,
		CapDrop:     w.CapDrop,
		Labels:      w.Labels,
		Networks:    w.Networks,
		Resources:   w.Resources,
		StopSignal:  w.StopSignal,
		StopTimeout: w.StopTimeout,
	}
	for _, s := range w.Secrets {
		in.Secrets = append(in.Secrets, secretRef{Name: s.Name, Handle: s.Handle})
	}
	if len(w.Health.Cmd) > 0 {
		h := w.Health
		in.HealthCmd = &dockerHealthCheck{
			Cmd: h.Cmd, Interval: h.Interval, Timeout: h.Timeout,
			StartPeriod: h.StartPeriod, Retries: h.Retries,
		}
	}
	return hashJSON(in)
}

// specHashInput is the projection of a WorkloadSpec that SpecHash hashes. Every
// field is omitempty so that a nil and an empty list hash alike.
type specHashInput struct {
	Namespace   string             `json:"namespace,omitempty"`
	Project     string             `json:"project,omitempty"`
	Egg         string             `json:"egg,omitempty"`
	BlobID      string             `json:"blob,omitempty"`
	Image       string             `json:"image,omitempty"`
	Build       *BuildSpec         `json:"build,omitempty"`
	Revision    int                `json:"revision,omitempty"`
	Command     []string           `json:"command,omitempty"`
	Entrypoint  []string           `json:"entrypoint,omitempty"`
	User        string             `json:"user,omitempty"`
	WorkingDir  string             `json:"working_dir,omitempty"`
	Env         map[string]string  `json:"env,omitempty"`
	Aliases     []string           `json:"aliases,omitempty"`
	HealthCmd   *dockerHealthCheck `json:"health_cmd,omitempty"`
	Volumes     []VolumeMount      `json:"volumes,omitempty"`
	Binds       []BindMount        `json:"binds,omitempty"`
	Secrets     []secretRef        `json:"secrets,omitempty"`
	Tmpfs       []string           `json:"tmpfs,omitempty"`
	ReadOnly    bool               `json:"read_only,omitempty"`
	CapAdd      []string           `json:"cap_add,omitempty"`
	CapDrop     []string           `json:"cap_drop,omitempty"`
	Labels      map[string]string  `json:"labels,omitempty"`
	Networks    []string           `json:"networks,omitempty"`
	Resources   Resources          `json:"resources,omitzero"`
	StopSignal  string             `json:"stop_signal,omitempty"`
	StopTimeout time.Duration      `json:"stop_timeout,omitempty"`
}

type dockerHealthCheck struct {
	Cmd         []string      `json:"cmd"`
	Interval    time.Duration `json:"interval,omitempty"`
	Timeout     time.Duration `json:"timeout,omitempty"`
	StartPeriod time.Duration `json:"start_period,omitempty"`
	Retries     int           `json:"retries,omitempty"`
}

type secretRef struct {
	Name   string `json:"name"`
	Handle string `json:"handle"`
}
