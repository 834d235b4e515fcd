// Package dockertest is the harness for tests that run against the real Docker
// Engine: it builds FROM scratch images from this repository's Go main
// packages (nothing can be pulled here), gives each test process a run ID and
// each test a scope, labels everything a test creates with them, removes it
// when the test ends, and sets up foreign objects that the code under test
// must leave alone.
//
// The invariant it keeps: a test only ever removes objects that carry its own
// labels. It never lists the host's objects to delete them by name, and never
// prunes, because the same engine runs other helpers' tests and whatever else
// the machine hosts. Docker 20.10 runs out of bridge address pools after about
// 30 networks, so scopes remove their networks as soon as their test ends.
package dockertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	cerrdefs "github.com/containerd/errdefs"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"

	"github.com/hatchery/hatchery/internal/containers"
)

const (
	// RunLabel marks every object a test process creates; its value is the
	// process's RunID. CI sweeps leftovers by this label alone.
	RunLabel = containers.LabelTestRun
	// ScopeLabel marks the objects of one test (one Scope), so tests running
	// in the same process clean up only their own.
	ScopeLabel = "io.hatchery.test-scope"
)

// callTimeout bounds every Docker call the harness makes: a hung engine
// fails a test instead of hanging it until the global test timeout.
const callTimeout = 60 * time.Second

var runID = sync.OnceValue(func() string { return "r" + randomHex(4) })

// RunID is this test process's unique run ID: short, since it ends up in
// object names.
func RunID() string { return runID() }

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b)
}

// NewClient connects to the engine from the environment (DOCKER_HOST or the
// default socket), negotiating the API version down to the engine's (1.41 on
// Debian's 20.10), and checks that it answers.
func NewClient(ctx context.Context) (*client.Client, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		cli.Close()
		return nil, fmt.Errorf("docker engine not reachable (these tests need one): %w", err)
	}
	return cli, nil
}

// Main runs a package's tests, then removes everything of this run that
// scopes did not (images in particular, which are shared by the tests of a
// process). Use it as `func TestMain(m *testing.M) { os.Exit(dockertest.Main(m)) }`.
func Main(m *testing.M) int {
	code := m.Run()
	ctx := context.Background()
	cli, err := NewClient(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dockertest:", err)
		return code
	}
	defer cli.Close()
	if err := Sweep(ctx, cli, filters.Arg("label", RunLabel+"="+RunID())); err != nil {
		fmt.Fprintln(os.Stderr, "dockertest: sweep:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Sweep removes the containers, networks, volumes and images matching every
// one of the given label filters, in that order (containers first, since
// they hold the others). It refuses to run without a filter: an empty filter
// would match the whole host. It goes on past a failed removal and returns
// all failures.
func Sweep(ctx context.Context, cli client.APIClient, labelFilters ...filters.KeyValuePair) error {
	if len(labelFilters) == 0 {
		return errors.New("sweep without a label filter refused: it would remove everything")
	}
	f := filters.NewArgs(labelFilters...)
	var errs []error
	call := func(fn func(context.Context) error) {
		ctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		if err := fn(ctx); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	call(func(ctx context.Context) error {
		cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
		if err != nil {
			return fmt.Errorf("list containers: %w", err)
		}
		var rmErrs []error
		for _, c := range cs {
			if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
				rmErrs = append(rmErrs, fmt.Errorf("remove container %s: %w", c.ID[:12], err))
			}
		}
		return errors.Join(rmErrs...)
	})
	call(func(ctx context.Context) error {
		ns, err := cli.NetworkList(ctx, network.ListOptions{Filters: f})
		if err != nil {
			return fmt.Errorf("list networks: %w", err)
		}
		var rmErrs []error
		for _, n := range ns {
			if err := cli.NetworkRemove(ctx, n.ID); err != nil && !cerrdefs.IsNotFound(err) {
				rmErrs = append(rmErrs, fmt.Errorf("remove network %s: %w", n.Name, err))
			}
		}
		return errors.Join(rmErrs...)
	})
	call(func(ctx context.Context) error {
		vs, err := cli.VolumeList(ctx, volume.ListOptions{Filters: f})
		if err != nil {
			return fmt.Errorf("list volumes: %w", err)
		}
		var rmErrs []error
		for _, v := range vs.Volumes {
			if err := cli.VolumeRemove(ctx, v.Name, true); err != nil && !cerrdefs.IsNotFound(err) {
				rmErrs = append(rmErrs, fmt.Errorf("remove volume %s: %w", v.Name, err))
			}
		}
		return errors.Join(rmErrs...)
	})
	call(func(ctx context.Context) error {
		is, err := cli.ImageList(ctx, image.ListOptions{All: true, Filters: f})
		if err != nil {
			return fmt.Errorf("list images: %w", err)
		}
		var rmErrs []error
		for _, i := range is {
			if _, err := cli.ImageRemove(ctx, i.ID, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
				rmErrs = append(rmErrs, fmt.Errorf("remove image %s: %w", i.ID, err))
			}
		}
		return errors.Join(rmErrs...)
	})
	return errors.Join(errs...)
}
