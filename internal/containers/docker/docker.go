// Package docker is the containers.Client on a real Docker Engine, through the
// Docker Engine Go SDK with the API version negotiated (down to 1.41 on
// Debian's Docker 20.10).
//
// Invariants:
//   - It lists, inspects and changes only objects labelled
//     io.hatchery.managed=true with its host's ID: List filters on both labels,
//     and every call on a container ID checks them again before acting (a
//     foreign ID gets containers.ErrNotFound and is left alone).
//   - Client calls only start work: image pulls and builds, drains, stops and
//     restarts run as tasks the Engine owns (containers.Tasks), so a converge never
//     waits for them.
//   - Every Docker call has a timeout, so a hung engine fails a call instead
//     of blocking the agent's loop.
//   - Health is probed by a monitor on its own goroutines; List only reads its
//     latest results.
//   - A volume is never removed implicitly: only RemoveVolumes, for volumes the
//     desired state marks for deletion.
package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

var (
	_ containers.Client    = (*Engine)(nil)
	_ containers.LogReader = (*Engine)(nil)
)

// BlobSource fetches a source Blob (a build context, as a tar stream) by its
// digest. The Engine verifies the digest itself: the source need not be
// trusted.
type BlobSource interface {
	OpenBlob(ctx context.Context, digest string) (io.ReadCloser, error)
}

// Ingress is the agent's proxy as the Engine sees it (*ingress.Ingress is
// one): a container leaves traffic before it stops.
type Ingress interface {
	// Drain takes the container out of traffic and returns once its requests
	// in flight have finished, the ingress's own drain timeout passed, or ctx
	// is done.
	Drain(ctx context.Context, containerID string) error
	// Gone says the container stopped or is about to restart: it leaves
	// traffic at once, and rejoins only once the ingress sees it healthy again.
	Gone(containerID string)
}

// Config configures an Engine.
type Config struct {
	// HostID is this host's ID: the Engine's scope on the Docker host.
	HostID string
	// SecretDir holds the secret files, one directory per container. It
	// should be on a tmpfs the agent owns (default /dev/shm/hatch/<host ID>;
	// /run is not a tmpfs on these machines).
	SecretDir string
	// Labels are added to every object the Engine creates (tests put their
	// run label here). Hatchery's own labels win over them.
	Labels map[string]string
	// CallTimeout bounds each short Docker call (default 30s).
	CallTimeout time.Duration
	// ImageTimeout bounds an image pull or build (default 15m).
	ImageTimeout time.Duration
	// Blobs fetches the build contexts of workloads built from a Blob (the
	// control plane's client). Required.
	Blobs BlobSource
	// BuiltinImages are the images the agent carries itself (the relay's),
	// by reference: one missing on the Engine is built from the context
	// its function makes, never pulled.
	BuiltinImages map[string]BuiltinImage
	// Ingress is told before a container stops. Required.
	Ingress Ingress
	// OnChange is called (on the Engine's goroutines, so it must not block)
	// when a task ends or a probed container's health changes: the agent
	// converges then. Required.
	OnChange func()
	// ProbeConcurrency bounds the health probes in flight (default 16).
	ProbeConcurrency int
	// Logger receives the Engine's logs. Required. Secret and environment
	// values are never logged.
	Logger *zap.Logger
}

// BuiltinImage makes the build context of a built-in image: a tar holding
// its Dockerfile and files, built FROM scratch with the classic builder.
type BuiltinImage func() (io.Reader, error)

// DefaultConfig returns the defaults for a host.
func DefaultConfig(hostID string) Config {
	return Config{
		HostID:           hostID,
		SecretDir:        "/dev/shm/hatch/" + hostID,
		CallTimeout:      30 * time.Second,
		ImageTimeout:     15 * time.Minute,
		ProbeConcurrency: 16,
	}
}

// Validate reports every setting the Engine cannot work with, missing
// dependencies included.
func (c Config) Validate() error {
	var errs []error
	if c.HostID == "" {
		errs = append(errs, errors.New("no host ID"))
	}
	if c.SecretDir == "" {
		errs = append(errs, errors.New("no secret directory"))
	}
	if c.CallTimeout <= 0 || c.ImageTimeout <= 0 {
		errs = append(errs, errors.New("timeouts must be positive"))
	}
	if c.ProbeConcurrency <= 0 {
		errs = append(errs, errors.New("probe concurrency must be positive"))
	}
	for _, k := range slices.Sorted(maps.Keys(c.Labels)) {
		if k == containers.LabelManaged || k == containers.LabelHost {
			errs = append(errs, fmt.Errorf("label %s is Hatchery's own", k))
		}
	}
	if c.Blobs == nil {
		errs = append(errs, errors.New("no blob source (Blobs)"))
	}
	if c.Ingress == nil {
		errs = append(errs, errors.New("no ingress (Ingress)"))
	}
	if c.OnChange == nil {
		errs = append(errs, errors.New("no change callback (OnChange)"))
	}
	if c.Logger == nil {
		errs = append(errs, errors.New("no logger (Logger)"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("docker adapter config: %w", err)
	}
	return nil
}

// Engine is a containers.Client on a real Docker Engine. It is safe for
// concurrent use. Close stops its goroutines.
type Engine struct {
	cfg   Config
	api   dockerAPI
	log   *zap.Logger
	tasks *containers.Tasks
	mon   *monitor

	ctx    context.Context // the monitor's, cancelled by Close (the tasks have their own)
	cancel context.CancelFunc
	wg     sync.WaitGroup // the monitor goroutine

	imageMu sync.Mutex             // guards images
	images  map[string]*sync.Mutex // one lock per image reference: one pull or build at a time
	netMu   sync.Mutex             // serialises network creation and pruning

	mu        sync.Mutex                       // guards workloads
	workloads map[string]contract.WorkloadSpec // by workload ID: the probes to run
}

// New returns an Engine on the Docker Engine that api talks to (a
// *client.Client made with client.WithAPIVersionNegotiation()), and starts its
// health monitor. It removes secret files left by containers that no longer
// exist (an agent killed mid-stop).
func New(ctx context.Context, api dockerAPI, cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With(zap.String("host", cfg.HostID))
	e := &Engine{
		cfg: cfg, api: api, log: log,
		tasks:     containers.NewTasks(log, time.Now),
		images:    map[string]*sync.Mutex{},
		workloads: map[string]contract.WorkloadSpec{},
	}
	e.tasks.OnEnd(e.changed)
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.mon = newMonitor(probeHTTPOrTCP, cfg.ProbeConcurrency, time.Now, e.changed)
	if err := e.secrets().init(); err != nil {
		return nil, err
	}
	if err := e.sweepSecrets(ctx); err != nil {
		return nil, err
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.mon.run(e.ctx)
	}()
	return e, nil
}

// Close cancels the tasks in progress and the monitor, and waits for them
// (or for ctx). Containers are left as they are: an agent restarting adopts
// them.
func (e *Engine) Close(ctx context.Context) error {
	e.cancel()
	if err := e.tasks.Close(ctx); err != nil {
		return fmt.Errorf("close engine: %w", err)
	}
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close engine: %w", ctx.Err())
	}
}

// Failures returns the last failure of each task that has not succeeded
// since, for the status report.
func (e *Engine) Failures() []containers.TaskFailure { return e.tasks.Failures() }

// SetWorkloads tells the Engine the desired workloads, whose health settings
// (HTTP or TCP probes, port) the monitor applies to their containers. The
// agent calls it with each desired state, before it lists: a container whose
// workload the Engine does not know is judged by its Docker HEALTHCHECK, or
// by running.
func (e *Engine) SetWorkloads(specs []contract.WorkloadSpec) {
	m := make(map[string]contract.WorkloadSpec, len(specs))
	for _, s := range specs {
		m[s.ID()] = s
	}
	e.mu.Lock()
	e.workloads = m
	e.mu.Unlock()
}

func (e *Engine) workload(id string) (contract.WorkloadSpec, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	w, ok := e.workloads[id]
	return w, ok
}

// rememberWorkload records a workload seen in a Start, so its probes apply
// even before the next SetWorkloads.
func (e *Engine) rememberWorkload(w contract.WorkloadSpec) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.workloads[w.ID()]; !ok {
		e.workloads[w.ID()] = w
	}
}

func (e *Engine) changed() { e.cfg.OnChange() }

// call returns a context bounded by the call timeout.
func (e *Engine) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, e.cfg.CallTimeout)
}

// labels returns the extra labels merged with Hatchery's (which win).
func (e *Engine) labels(own map[string]string) map[string]string {
	out := maps.Clone(e.cfg.Labels)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, own)
	return out
}

// ownedFilter selects this host's managed objects.
func (e *Engine) ownedFilter() filters.Args {
	return filters.NewArgs(
		filters.Arg("label", containers.LabelManaged+"=true"),
		filters.Arg("label", containers.LabelHost+"="+e.cfg.HostID))
}

// run begins t and runs fn as a task (containers.Tasks.Go): work already in
// progress is not begun twice, and OnChange hears when it has ended.
func (e *Engine) run(t containers.Task, fn func(ctx context.Context) error) error {
	return e.tasks.Go(t, fn)
}

// inspectOwned inspects a container and checks that it is this host's. A
// container that does not exist gives (nil, nil); a foreign one
// containers.ErrNotFound.
func (e *Engine) inspectOwned(ctx context.Context, op, id string) (*container.InspectResponse, error) {
	ctx, cancel := e.call(ctx)
	defer cancel()
	c, err := e.api.ContainerInspect(ctx, id)
	if cerrdefs.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: inspect: %w", op, short(id), err)
	}
	if c.Config == nil || !containers.Owned(c.Config.Labels, e.cfg.HostID) {
		return nil, fmt.Errorf("%s %s: %w", op, short(id), containers.ErrNotFound)
	}
	return &c, nil
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
