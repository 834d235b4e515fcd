package docker

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/hatchery/hatchery/internal/containers"
)

// hungAPI is a Docker Engine that never answers: each call waits for its
// context. Calls the test does not expect panic on the nil embedded API.
type hungAPI struct{ dockerAPI }

func (hungAPI) ContainerList(ctx context.Context, _ container.ListOptions) ([]container.Summary, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (hungAPI) ContainerInspect(ctx context.Context, _ string) (container.InspectResponse, error) {
	<-ctx.Done()
	return container.InspectResponse{}, ctx.Err()
}

func TestAHungEngineFailsCallsInsteadOfBlockingThem(t *testing.T) {
	cfg := testConfig(t, "h1")
	cfg.SecretDir = t.TempDir()
	cfg.CallTimeout = 100 * time.Millisecond
	e, err := New(context.Background(), hungAPI{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	calls := map[string]func() error{
		"list":    func() error { _, err := e.List(context.Background()); return err },
		"stop":    func() error { return e.Stop(context.Background(), containers.StopRequest{ID: "c1"}) },
		"drain":   func() error { return e.Drain(context.Background(), containers.StopRequest{ID: "c1"}) },
		"restart": func() error { return e.Restart(context.Background(), containers.RestartRequest{ID: "c1"}) },
		"logs":    func() error { _, err := e.Logs(context.Background(), "c1", 10); return err },
	}
	for name, call := range calls {
		start := time.Now()
		err := call()
		if err == nil {
			t.Errorf("%s on a hung engine succeeded", name)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("%s took %s with a 100ms call timeout", name, took)
		}
	}
}
