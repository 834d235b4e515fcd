package provider

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/desired"
)

// preview plans yaml for the project and previews the plan.
func (e *env) preview(project, yaml string, opts Options) ([]desired.HostSteps, error) {
	e.t.Helper()
	g := e.project(project, yaml, nil)
	plan, err := e.reconciler(opts).Plan(e.t.Context(), project, g)
	if err != nil {
		e.t.Fatal(err)
	}
	changes := make([]desired.PlanChange, len(plan.Changes))
	for i, c := range plan.Changes {
		changes[i] = desired.PlanChange{Change: c}
	}
	return e.set.Preview(e.t.Context(), project, changes, mustList(e.t, e, project), opts.DeleteVolumes)
}

func stepsOf(hs []desired.HostSteps) map[string][]string {
	out := map[string][]string{}
	for _, h := range hs {
		out[h.Name] = h.Steps
	}
	return out
}

func TestPreviewSaysWhatEachHostWillDo(t *testing.T) {
	e := newEnv(t, "h1", "h2")
	e.apply("default/shop", webYAML, nil) // web: 2 on one host, 1 on the other
	before := e.slots("default/shop/web", "h1", "h2")
	yaml := strings.NewReplacer("web:1", "web:2", "replicas: 3", "replicas: 4").Replace(webYAML) +
		"  api:\n    image: api:1\n    replicas: 2\n"
	yaml = strings.Replace(yaml, "networks:\n  backend: {}\n", "", 1) + "networks:\n  backend: {}\n"
	hs, err := e.preview("default/shop", yaml, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := stepsOf(hs)
	for _, h := range []string{"h1", "h2"} {
		if !slices.Contains(got[h], "start api: 1 replica") {
			t.Errorf("%s: %q, want api started", h, got[h])
		}
		n := before[h]
		if !slices.ContainsFunc(got[h], func(s string) bool { return strings.HasPrefix(s, "roll web: ") }) {
			t.Errorf("%s: %q, want web rolled", h, got[h])
		}
		if n == 1 && !slices.Contains(got[h], "scale web: 1 -> 2 replicas") {
			t.Errorf("%s: %q, want web scaled from 1 to 2", h, got[h])
		}
	}
	// Nothing was written.
	if after := e.slots("default/shop/web", "h1", "h2"); after["h1"]+after["h2"] != 3 {
		t.Fatalf("preview changed the desired state: %v", after)
	}

	hs, err = e.preview("default/shop", "project: shop\neggs:\n  other: {image: o:1}\n", Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"h1", "h2"} {
		want := fmt.Sprintf("stop web: %d replicas", before[h])
		if before[h] == 1 {
			want = "stop web: 1 replica"
		}
		if !slices.Contains(stepsOf(hs)[h], want) {
			t.Errorf("%s: %q, want %q", h, stepsOf(hs)[h], want)
		}
	}
}

func TestPreviewOfVolumesAndOfPlacementKnownAfterApply(t *testing.T) {
	e := newEnv(t, "h1")
	hs, err := e.preview("default/data", statefulYAML, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := stepsOf(hs)
	if !slices.Contains(got["h1"], "create volume pgdata") {
		t.Fatalf("h1: %q, want the volume created there", got["h1"])
	}
	if !slices.Contains(got["(known after apply)"], "place db: 1 replica") {
		t.Fatalf("%v: want db's placement known after apply (its volume's host is)", got)
	}
	e.apply("default/data", statefulYAML, nil)
	hs, _ = e.preview("default/data", "project: data\neggs:\n  app: {image: app:1}\n", Options{})
	if !slices.Contains(stepsOf(hs)["h1"], "keep volume pgdata (retained: hatch destroy --volumes deletes it)") {
		t.Fatalf("%v: want pgdata retained", stepsOf(hs))
	}
	hs, _ = e.preview("default/data", "project: data\neggs:\n  app: {image: app:1}\n", Options{DeleteVolumes: true})
	if !slices.Contains(stepsOf(hs)["h1"], "delete volume pgdata and its data") {
		t.Fatalf("%v: want pgdata deleted", stepsOf(hs))
	}
}

func TestPreviewRefusesARouteHeldByAnotherProject(t *testing.T) {
	e := newEnv(t, "h1", "h2")
	e.apply("default/a", strings.Replace(routeYAML, "%s", "a", 1)+"    placement: {hosts: [h1]}\n", nil)
	for claim, yaml := range map[string]string{
		"route api.localhost/v1": "project: b\neggs:\n  w: {image: w:1, port: 80, routes: [\"api.localhost/v1\"], placement: {hosts: [h2]}}\n",
		"port 8088":              "project: b\neggs:\n  w: {image: w:1, port: 80, ports: [\"8088:80\"], placement: {hosts: [h2]}}\n",
		// Its placement is known only after apply: the claim is refused anyway.
		"port 8088 ": "project: b\neggs:\n  w: {image: w:1, ports: [\"8088:80\"], volumes: [\"d:/d\"]}\nvolumes:\n  d: {}\n",
	} {
		_, err := e.preview("staging/b", yaml, Options{})
		var conflict *desired.ConflictError
		if !errors.As(err, &conflict) || conflict.Claim != strings.TrimSpace(claim) || conflict.Holder != "default/a/web" {
			t.Fatalf("preview: %v, want a conflict on %s held by default/a/web", err, claim)
		}
	}
	// The project holding it may plan it again.
	if _, err := e.preview("default/a", strings.Replace(routeYAML, "%s", "a", 1), Options{}); err != nil {
		t.Fatalf("preview of the holder itself: %v", err)
	}
}
