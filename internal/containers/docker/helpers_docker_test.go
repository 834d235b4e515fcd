//go:build docker

package docker

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

func TestMain(m *testing.M) { os.Exit(dockertest.Main(m)) }

// env is one test's Engine on the real Docker Engine, with its own host ID
// (so its names are its own) and the test's labels on everything it creates.
type env struct {
	t       *testing.T
	s       *dockertest.Scope
	e       *Engine
	host    string
	image   string
	logs    *observer.ObservedLogs
	changes atomic.Int32
}

func newEnv(t *testing.T, configure ...func(*Config)) *env {
	t.Helper()
	s := dockertest.NewScope(t)
	v := &env{t: t, s: s, host: "h" + s.ID, image: dockertest.Image(t, dockertest.ImageSpec{})}
	core, logs := observer.New(zapcore.DebugLevel)
	v.logs = logs
	cfg := testConfig(t, v.host)
	cfg.SecretDir = s.ShmDir()
	cfg.Labels = s.Labels(nil)
	cfg.Logger = zap.New(core)
	cfg.OnChange = func() { v.changes.Add(1) }
	for _, c := range configure {
		c(&cfg)
	}
	v.e = newEngine(t, s, cfg)
	return v
}

// newEngine returns an Engine on the scope's client, closed when the test
// ends. Registered after the scope's cleanup, that runs first: the tasks
// stop before their containers are swept.
func newEngine(t *testing.T, s *dockertest.Scope, cfg Config) *Engine {
	t.Helper()
	e, err := New(t.Context(), s.Client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return e
}

// network returns the Docker name of one of the test project's networks.
func (v *env) network(name string) string {
	return contract.NetworkName(v.host, "default", "shop", name)
}

// spec returns a workload of the test app, probed over HTTP every 300ms.
func (v *env) spec(egg string) contract.WorkloadSpec {
	return contract.WorkloadSpec{
		Namespace: "default", Project: "shop", Egg: egg,
		Image: v.image, Replicas: 1, Port: 8080,
		Env:         map[string]string{"APP_VERSION": "v1"},
		Health:      contract.HealthCheck{HTTP: "/healthz", Interval: 300 * time.Millisecond, Retries: 2},
		Networks:    []string{v.network("default")},
		StopTimeout: 2 * time.Second,
	}
}

func (v *env) start(w contract.WorkloadSpec, slot int, replace string) {
	v.t.Helper()
	err := v.e.Start(v.t.Context(), containers.StartRequest{HostID: v.host, Spec: w, SpecHash: contract.SpecHash(w), Slot: slot, Replace: replace})
	if err != nil {
		v.t.Fatal(err)
	}
}

func (v *env) list() []containers.Container {
	v.t.Helper()
	cs, err := v.e.List(v.t.Context())
	if err != nil {
		v.t.Fatal(err)
	}
	return cs
}

// waitFor lists every 100ms until cond holds (or fails the test after 40s)
// and returns that list.
func (v *env) waitFor(what string, cond func([]containers.Container) bool) []containers.Container {
	v.t.Helper()
	deadline := time.Now().Add(40 * time.Second)
	for {
		cs := v.list()
		if cond(cs) {
			return cs
		}
		if time.Now().After(deadline) {
			v.t.Fatalf("not within 40s: %s; last list:\n%s\ntask failures: %v", what, dump(cs), v.e.Failures())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func dump(cs []containers.Container) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "  %s %s slot=%d state=%s healthy=%v streak=%d exit=%d\n", short(c.ID), c.WorkloadID, c.Slot, c.State, c.Healthy, c.FailingStreak, c.ExitCode)
	}
	return b.String()
}

// of returns the containers of one workload (placeholders included).
func of(cs []containers.Container, egg string) []containers.Container {
	var out []containers.Container
	for _, c := range cs {
		if c.WorkloadID == "default/shop/"+egg {
			out = append(out, c)
		}
	}
	return out
}

func allHealthy(cs []containers.Container, egg string, n int) bool {
	mine := of(cs, egg)
	if len(mine) != n {
		return false
	}
	for _, c := range mine {
		if c.State != contract.StateRunning || !c.Healthy {
			return false
		}
	}
	return true
}

// url returns http://<container IP>:8080<path>.
func (v *env) url(id, path string) string {
	v.t.Helper()
	ip, err := dockertest.ContainerIP(v.t.Context(), v.s.Client, id, v.network("default"))
	if err != nil {
		ip, err = dockertest.ContainerIP(v.t.Context(), v.s.Client, id, "")
	}
	if err != nil {
		v.t.Fatal(err)
	}
	return "http://" + ip + ":8080" + path
}

// get asks the container and returns the status and trimmed body.
func (v *env) get(id, path string) (int, string) {
	v.t.Helper()
	code, body, err := dockertest.Get(v.t.Context(), v.url(id, path))
	if err != nil {
		v.t.Fatalf("GET %s: %v", path, err)
	}
	return code, strings.TrimSpace(body)
}

func (v *env) do(method, id, path, body string) int {
	v.t.Helper()
	code, _, err := dockertest.Do(v.t.Context(), method, v.url(id, path), strings.NewReader(body))
	if err != nil {
		v.t.Fatalf("%s %s: %v", method, path, err)
	}
	return code
}

// gone waits until Docker no longer knows the container.
func (v *env) gone(id string) {
	v.t.Helper()
	dockertest.Eventually(v.t, 30*time.Second, 100*time.Millisecond, func() error {
		if _, err := v.s.Client.ContainerInspect(v.t.Context(), id); err == nil {
			return fmt.Errorf("container %s still exists", short(id))
		}
		return nil
	})
}

// logged reports whether any log entry (message or field) contains s.
func (v *env) logged(s string) bool {
	for _, entry := range v.logs.All() {
		if strings.Contains(entry.Message, s) {
			return true
		}
		for _, f := range entry.Context {
			if strings.Contains(f.String, s) || (f.Interface != nil && strings.Contains(fmt.Sprint(f.Interface), s)) {
				return true
			}
		}
	}
	return false
}
