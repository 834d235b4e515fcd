package contract

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// specHashFields is the golden list: every leaf field of WorkloadSpec, and
// whether changing it needs a new container. "cmd-only" fields are in when the
// health check is a Docker HEALTHCHECK (Cmd) and out when the agent probes.
// A field added to WorkloadSpec without a line here fails the test.
var specHashFields = map[string]string{
	"Namespace":                "in",
	"Project":                  "in",
	"Egg":                      "in",
	"BlobID":                   "in",
	"Image":                    "in",
	"Build.Dockerfile":         "in",
	"Build.Args":               "in",
	"Build.Target":             "in",
	"Pull":                     "out",
	"PullAuth.Registry":        "out",
	"PullAuth.Username":        "out",
	"PullAuth.Handle":          "out",
	"PullAuth.Password":        "out",
	"Replicas":                 "out",
	"Fenced":                   "out",
	"Revision":                 "in",
	"Command":                  "in",
	"Entrypoint":               "in",
	"User":                     "in",
	"WorkingDir":               "in",
	"Env":                      "in",
	"Port":                     "out",
	"Ports.HostPort":           "out",
	"Ports.ContainerPort":      "out",
	"Ports.Protocol":           "out",
	"Routes.Host":              "out",
	"Routes.PathPrefix":        "out",
	"Routes.UpstreamTimeout":   "out",
	"Routes.TLS":               "out",
	"Routes.HSTS":              "out",
	"Aliases":                  "out",
	"NetworkAliases":           "in",
	"Uses":                     "out",
	"Health.HTTP":              "out",
	"Health.TCP":               "out",
	"Health.Cmd":               "in",
	"Health.Interval":          "cmd-only",
	"Health.Timeout":           "cmd-only",
	"Health.StartPeriod":       "cmd-only",
	"Health.Retries":           "cmd-only",
	"Restart":                  "out",
	"Volumes.Name":             "in",
	"Volumes.DockerName":       "in",
	"Volumes.Target":           "in",
	"Volumes.ReadOnly":         "in",
	"Binds.Source":             "in",
	"Binds.Target":             "in",
	"Binds.ReadOnly":           "in",
	"Secrets.Name":             "in",
	"Secrets.Handle":           "in",
	"Secrets.Value":            "out",
	"Tmpfs":                    "in",
	"ReadOnly":                 "in",
	"CapAdd":                   "in",
	"CapDrop":                  "in",
	"Labels":                   "in",
	"Networks":                 "in",
	"Resources.MemoryBytes":    "in",
	"Resources.NanoCPUs":       "in",
	"Resources.PIDs":           "in",
	"Rollout.Order":            "out",
	"Rollout.MaxSurge":         "out",
	"Rollout.MinReady":         "out",
	"Rollout.DrainTimeout":     "out",
	"Rollout.ProgressDeadline": "out",
	"Rollout.AutoRevert":       "out",
	"StopSignal":               "in",
	"StopTimeout":              "in",
}

// fullSpec returns a workload with every field set and every list non-empty,
// so that each leaf field can be changed in place.
func fullSpec() WorkloadSpec {
	return WorkloadSpec{
		Namespace: "default", Project: "shop", Egg: "web",
		BlobID: "sha256:abc", Image: "nginx:1.27",
		Build:    &BuildSpec{Dockerfile: "Dockerfile", Args: map[string]string{"A": "1"}, Target: "app"},
		PullAuth: &RegistryAuth{Registry: "ghcr.io", Username: "ci", Handle: "p1", Password: "pw"},
		Replicas: 3, Revision: 1,
		Command: []string{"/app"}, Entrypoint: []string{"/bin/sh"}, User: "1000", WorkingDir: "/srv",
		Env:            map[string]string{"REGION": "eu"},
		Port:           8080,
		Ports:          []PublishedPort{{HostPort: 8088, ContainerPort: 8080, Protocol: "tcp"}},
		Routes:         []Route{{Host: "shop.localhost", PathPrefix: "/v1"}},
		Aliases:        []string{"shop-web"},
		NetworkAliases: []string{"web"},
		Uses:           []string{"db"},
		Health: HealthCheck{HTTP: "/healthz", TCP: true, Cmd: []string{"CMD", "/check"},
			Interval: time.Second, Timeout: time.Second, StartPeriod: time.Second, Retries: 3},
		Restart:   RestartAlways,
		Volumes:   []VolumeMount{{Name: "data", DockerName: "hatch-shop-data-1", Target: "/data"}},
		Binds:     []BindMount{{Source: "/srv", Target: "/srv"}},
		Secrets:   []SecretFile{{Name: "key", Handle: "h1", Value: "v1"}},
		Tmpfs:     []string{"/tmp"},
		CapAdd:    []string{"NET_ADMIN"},
		CapDrop:   []string{"ALL"},
		Labels:    map[string]string{"team": "payments"},
		Networks:  []string{"hatch-shop-default-1"},
		Resources: Resources{MemoryBytes: 1 << 28, NanoCPUs: 5e8, PIDs: 256},
		Rollout: Rollout{Order: StartFirst, MaxSurge: 1, MinReady: time.Second,
			DrainTimeout: time.Second, ProgressDeadline: time.Minute},
		StopSignal: "SIGTERM", StopTimeout: time.Second,
	}
}

// leafPaths lists the dotted paths of every leaf field of t, descending into
// structs, pointers to structs and slices of structs.
func leafPaths(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		ft := f.Type
		for ft.Kind() == reflect.Pointer || (ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct) {
			ft = ft.Elem()
		}
		path := prefix + f.Name
		if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Time]() {
			out = append(out, leafPaths(ft, path+".")...)
			continue
		}
		out = append(out, path)
	}
	return out
}

// mutate changes the field at path (the first element of any list on the way)
// to a different value.
func mutate(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	for _, name := range strings.Split(path, ".") {
		for v.Kind() == reflect.Pointer || v.Kind() == reflect.Slice {
			if v.Kind() == reflect.Slice {
				v = v.Index(0)
			} else {
				v = v.Elem()
			}
		}
		v = v.FieldByName(name)
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Int, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Slice:
		v.Set(reflect.Append(v, reflect.ValueOf("x")))
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for _, k := range v.MapKeys() {
			m.SetMapIndex(k, v.MapIndex(k))
		}
		m.SetMapIndex(reflect.ValueOf("extra"), reflect.ValueOf("x"))
		v.Set(m)
	default:
		t.Fatalf("mutate %s: unsupported kind %s", path, v.Kind())
	}
}

// clone deep-copies a spec through JSON, the way it travels.
func clone(t *testing.T, w WorkloadSpec) WorkloadSpec {
	t.Helper()
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	var c WorkloadSpec
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSpecHashFields(t *testing.T) {
	paths := leafPaths(reflect.TypeFor[WorkloadSpec](), "")
	for _, p := range paths {
		if _, ok := specHashFields[p]; !ok {
			t.Errorf("field %s is not in the golden list: decide whether it needs a new container and add it", p)
		}
	}
	for p := range specHashFields {
		if !slices.Contains(paths, p) {
			t.Errorf("golden list names %s, which WorkloadSpec no longer has", p)
		}
	}

	base := fullSpec()
	noCmd := fullSpec()
	noCmd.Health.Cmd = nil
	for _, p := range paths {
		t.Run(p, func(t *testing.T) {
			check := func(base WorkloadSpec, wantChange bool) {
				changed := clone(t, base)
				mutate(t, reflect.ValueOf(&changed).Elem(), p)
				if reflect.DeepEqual(changed, base) {
					t.Fatalf("mutating %s changed nothing", p)
				}
				got := SpecHash(changed) != SpecHash(base)
				if got != wantChange {
					t.Errorf("changing %s: hash changed = %v, want %v", p, got, wantChange)
				}
			}
			switch specHashFields[p] {
			case "in":
				check(base, true)
			case "out":
				check(base, false)
			case "cmd-only":
				check(base, true)
				check(noCmd, false)
			default:
				t.Fatalf("golden list says %q for %s", specHashFields[p], p)
			}
		})
	}
}

func TestSpecHashIsStableAndTreatsEmptyListsAsAbsent(t *testing.T) {
	a := WorkloadSpec{Namespace: "default", Project: "shop", Egg: "web", Image: "nginx"}
	b := a
	b.Command = []string{}
	b.Env = map[string]string{}
	b.Build = nil
	if SpecHash(a) != SpecHash(b) {
		t.Errorf("nil and empty lists hash differently: %s vs %s", SpecHash(a), SpecHash(b))
	}
	if SpecHash(a) != SpecHash(clone(t, a)) {
		t.Error("hash changed through a JSON round trip")
	}
	c := a
	c.Egg = "api"
	if SpecHash(a) == SpecHash(c) {
		t.Error("two eggs with otherwise equal specs hash alike")
	}
}

// Containers made while an egg's replicas carried its name on their
// networks are stale once, so that upgrading replaces each with one that
// carries none; a workload on no network carried no name and keeps its
// hash. The old hashes are those the version before computed.
func TestSpecHashRollsContainersThatCarriedTheirEggsName(t *testing.T) {
	withNet := WorkloadSpec{Namespace: "default", Project: "shop", Egg: "web", Image: "web:1", Networks: []string{"hatch-shop-default-1a2b3c4d"}}
	aliased := withNet
	aliased.Aliases = []string{"shop-web"}
	noNet := WorkloadSpec{Namespace: "default", Project: "shop", Egg: "job", Image: "job:1"}
	for _, tc := range []struct {
		name  string
		w     WorkloadSpec
		old   string
		stale bool
	}{
		{"on a network", withNet, "58400eda1c54971c", true},
		{"on a network, with aliases", aliased, "84600cead568ad4b", true},
		{"on no network", noNet, "e780542f6810854c", false},
	} {
		if stale := SpecHash(tc.w) != tc.old; stale != tc.stale {
			t.Errorf("%s: hash %s, was %s: stale = %v, want %v", tc.name, SpecHash(tc.w), tc.old, stale, tc.stale)
		}
	}
	if SpecHash(withNet) != SpecHash(aliased) {
		t.Error("an egg's aliases changed its hash: its relays carry them, not its containers")
	}
}
