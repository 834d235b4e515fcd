package dataplane

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	dockerclient "github.com/docker/docker/client"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/containers"
)

// The fence's dead-man switch (docs/BACKUPS.md, "Failover"). The agent
// stops its fenced workloads itself once no status report of its has been
// answered for fence_after; an agent that is dead cannot. The data plane
// is a process of its own that outlives the agent, so the agent hands it a
// lease after each answered report: unless renewed by Until, the data
// plane stops every running container of the lease's workloads on this
// host, and again at each check while the lease stays lapsed (a container
// started meanwhile is stopped too). Stopping only, never starting: the
// agent alone starts containers, once a server has confirmed the host.

// FenceLease is the agent's lease on its fenced workloads.
type FenceLease struct {
	// Until is when the containers are stopped unless the lease is renewed:
	// the last answered report plus fence_after plus the drain the agent
	// itself would give them.
	Until time.Time
	// Workloads are the IDs of the Fenced workloads (their containers carry
	// them in containers.LabelWorkload).
	Workloads []string
	// StopTimeout is how long each container gets between the stop signal
	// and a kill.
	StopTimeout time.Duration
	// DockerHost is the Docker Engine the agent runs them on ("" for the
	// environment's default).
	DockerHost string
}

// deadmanEvery is how often a lapsed lease is enforced.
const deadmanEvery = 500 * time.Millisecond

// stopper is what the switch needs of the Docker Engine.
type stopper interface {
	ContainerList(ctx context.Context, opts container.ListOptions) ([]container.Summary, error)
	ContainerStop(ctx context.Context, id string, opts container.StopOptions) error
}

// deadman enforces the lease p.state.Lease until ctx ends.
func (p *plane) deadman(ctx context.Context) {
	t := time.NewTicker(deadmanEvery)
	defer t.Stop()
	var (
		docker     stopper
		dockerHost string
		warned     time.Time // the lapsed lease's Until last logged
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lease := p.snapshot().Lease
		if lease == nil || len(lease.Workloads) == 0 || time.Now().Before(lease.Until) {
			continue
		}
		if docker == nil || dockerHost != lease.DockerHost {
			c, err := newDockerClient(lease.DockerHost)
			if err != nil {
				p.log.Error("fence lease lapsed and the Docker Engine cannot be reached to stop its containers", zap.Error(err))
				continue
			}
			docker, dockerHost = c, lease.DockerHost
		}
		stopped, err := enforceLease(ctx, docker, p.cfg.HostID, *lease)
		if err != nil {
			p.log.Warn("fence lease lapsed: stopping its containers failed; trying again", zap.Error(err))
		}
		if len(stopped) > 0 || !warned.Equal(lease.Until) {
			p.log.Warn("the agent renewed no fence lease: stopped the containers of workloads whose volume fails over, so that they never run on two hosts",
				zap.Time("until", lease.Until), zap.Strings("workloads", lease.Workloads), zap.Strings("stopped", stopped))
			warned = lease.Until
		}
	}
}

// newDockerClient connects to host, or to the environment's Engine.
func newDockerClient(host string) (*dockerclient.Client, error) {
	opts := []dockerclient.Opt{dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation()}
	if host != "" {
		opts = append(opts, dockerclient.WithHost(host))
	}
	return dockerclient.NewClientWithOpts(opts...)
}

// enforceLease stops the running containers of the lease's workloads on
// host (the managed ones this host's agent made), and returns their IDs.
func enforceLease(ctx context.Context, docker stopper, host string, lease FenceLease) ([]string, error) {
	f := filters.NewArgs(filters.Arg("status", "running"), filters.Arg("label", containers.LabelManaged+"=true"),
		filters.Arg("label", containers.LabelHost+"="+host))
	ctx, cancel := context.WithTimeout(ctx, lease.StopTimeout+30*time.Second)
	defer cancel()
	list, err := docker.ContainerList(ctx, container.ListOptions{Filters: f})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	var stopped []string
	timeout := int(lease.StopTimeout.Round(time.Second) / time.Second)
	for _, c := range list {
		if !slices.Contains(lease.Workloads, c.Labels[containers.LabelWorkload]) {
			continue
		}
		if err := docker.ContainerStop(ctx, c.ID, container.StopOptions{Timeout: &timeout}); err != nil {
			return stopped, fmt.Errorf("stop container %s: %w", c.ID, err)
		}
		stopped = append(stopped, c.ID)
	}
	return stopped, nil
}
