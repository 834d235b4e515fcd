//go:build docker

package dockertest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func TestImageRunsTheAppAndPassesItsHealthcheck(t *testing.T) {
	s := NewScope(t)
	img := Image(t, ImageSpec{Env: map[string]string{"APP_VERSION": "baked"}, Healthcheck: AppHealthcheck})
	ctx := t.Context()
	c, err := s.Client.ContainerCreate(ctx, &container.Config{Image: img, Labels: s.Labels(nil)}, nil, nil, nil, s.Name("app"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Client.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 30*time.Second, 200*time.Millisecond, func() error {
		in, err := s.Client.ContainerInspect(ctx, c.ID)
		if err != nil {
			return err
		}
		if in.State.Health == nil || in.State.Health.Status != "healthy" {
			return fmt.Errorf("health %+v", in.State.Health)
		}
		return nil
	})
	ip, err := ContainerIP(ctx, s.Client, c.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	code, body, err := Get(ctx, "http://"+ip+":8080/version")
	if err != nil || code != 200 || strings.TrimSpace(body) != "baked" {
		t.Fatalf("/version = %d %q %v", code, body, err)
	}
}

func TestImageIsBuiltOncePerSpec(t *testing.T) {
	a := Image(t, ImageSpec{})
	b := Image(t, ImageSpec{})
	c := Image(t, ImageSpec{Env: map[string]string{"APP_VERSION": "other"}})
	if a != b {
		t.Errorf("the same spec built twice: %s, %s", a, b)
	}
	if a == c {
		t.Errorf("two specs share the tag %s", a)
	}
}

func TestScopeCleanupRemovesItsOwnObjectsOnly(t *testing.T) {
	outer := NewScope(t)
	ctx := t.Context()
	keep, err := outer.Client.VolumeCreate(ctx, volume.CreateOptions{Name: outer.Name("keep"), Labels: outer.Labels(nil)})
	if err != nil {
		t.Fatal(err)
	}
	var innerLabels map[string]string
	t.Run("inner", func(t *testing.T) {
		inner := NewScope(t)
		innerLabels = inner.Labels(nil)
		if _, err := inner.Client.VolumeCreate(ctx, volume.CreateOptions{Name: inner.Name("v"), Labels: innerLabels}); err != nil {
			t.Fatal(err)
		}
		if _, err := inner.Client.NetworkCreate(ctx, inner.Name("n"), network.CreateOptions{Labels: innerLabels}); err != nil {
			t.Fatal(err)
		}
		c, err := inner.Client.ContainerCreate(ctx, &container.Config{Image: Image(t, ImageSpec{}), Labels: innerLabels}, nil, nil, nil, inner.Name("c"))
		if err != nil {
			t.Fatal(err)
		}
		if err := inner.Client.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	f := filters.NewArgs(filters.Arg("label", ScopeLabel+"="+innerLabels[ScopeLabel]))
	cs, _ := outer.Client.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	ns, _ := outer.Client.NetworkList(ctx, network.ListOptions{Filters: f})
	vs, _ := outer.Client.VolumeList(ctx, volume.ListOptions{Filters: f})
	if len(cs)+len(ns)+len(vs.Volumes) != 0 {
		t.Fatalf("after the inner test: %d containers, %d networks, %d volumes left", len(cs), len(ns), len(vs.Volumes))
	}
	if _, err := outer.Client.VolumeInspect(ctx, keep.Name); err != nil {
		t.Fatalf("the outer scope's volume went with the inner scope: %v", err)
	}
}

func TestSweepRefusesToRunWithoutAFilter(t *testing.T) {
	cli, err := NewClient(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if err := Sweep(context.Background(), cli); err == nil {
		t.Fatal("Sweep without a filter ran")
	}
}

func TestForeignNoticesATouchedObject(t *testing.T) {
	s := NewScope(t)
	f := s.CreateForeign(ForeignOptions{
		Image:           Image(t, ImageSpec{}),
		OtherHostLabels: map[string]string{"io.hatchery.managed": "true", "io.hatchery.host": "other-host"},
	})
	ctx := t.Context()
	if changes, err := f.Changes(ctx); err != nil || len(changes) != 0 {
		t.Fatalf("fresh foreign objects: changes %v, %v", changes, err)
	}
	if len(f.containers) != 2 || len(f.networks) != 2 || len(f.volumes) != 2 {
		t.Fatalf("made %d containers, %d networks, %d volumes; want 2 of each", len(f.containers), len(f.networks), len(f.volumes))
	}
	timeout := 1
	if err := s.Client.ContainerStop(ctx, f.containers[1], container.StopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	changes, err := f.Changes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) == 0 || !strings.Contains(strings.Join(changes, "\n"), "exited, was running") {
		t.Fatalf("a stopped foreign container went unnoticed: %v", changes)
	}
}
