package spec

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

// roundTrip writes p, parses the output as a file in p's directory, and
// fails unless the result has the same resources and dependencies. It
// returns the output and the parsed project.
func roundTrip(t testing.TB, p *Project) ([]byte, *Project) {
	t.Helper()
	out, err := Marshal(p)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	back, err := Parse(out, filepath.Join(p.Dir, "converted.yaml"), Options{})
	if err != nil {
		t.Fatalf("the output does not load: %v\n%s", err, out)
	}
	if diff := resourcesDiff(p, back); diff != "" {
		t.Fatalf("the output gives other resources: %s\n%s", diff, out)
	}
	return out, back
}

// resourcesDiff says how two projects' resources and dependencies differ,
// or returns "" if they do not.
func resourcesDiff(a, b *Project) string {
	ra, da := a.Resources()
	rb, db := b.Resources()
	if len(ra) != len(rb) {
		return fmt.Sprintf("%d resources, want %d: %v, want %v", len(rb), len(ra), keysOf(rb), keysOf(ra))
	}
	for i := range ra {
		if ra[i].Key() != rb[i].Key() {
			return fmt.Sprintf("resource %s, want %s", rb[i].Key(), ra[i].Key())
		}
		if !resource.Equal(ra[i].Inputs, rb[i].Inputs) {
			return fmt.Sprintf("%s inputs\n got: %v\nwant: %v", ra[i].Key(), rb[i].Inputs, ra[i].Inputs)
		}
	}
	if fmt.Sprint(depsOf(da)) != fmt.Sprint(depsOf(db)) {
		return fmt.Sprintf("dependencies %v, want %v", depsOf(db), depsOf(da))
	}
	return ""
}

func keysOf(rs []*resource.Desired) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Key()
	}
	return out
}

func depsOf(ds []*resource.Dependency) []resource.Dependency {
	out := make([]resource.Dependency, len(ds))
	for i, d := range ds {
		out[i] = *d
	}
	return out
}

// Every test project, and the example shop, survives the round trip, and
// writing the parsed output again gives the same text: the output is canonical.
func TestMarshalRoundTripsTheTestProjects(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../examples/shop/hatch.yaml")
	for _, file := range files {
		t.Run(filepath.Base(filepath.Dir(file))+"/"+filepath.Base(file), func(t *testing.T) {
			p, err := Load(file, Options{LookupEnv: testEnv})
			if err != nil {
				t.Fatal(err)
			}
			out, back := roundTrip(t, p)
			again, err := Marshal(back)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, again) {
				t.Errorf("writing the output's project gives other text:\n%s\nthen:\n%s", out, again)
			}
		})
	}
}

// The output is meant to be read: only what differs from the defaults, in
// the short forms, with the user's way of writing references and "$".
func TestMarshalWritesWhatAUserWould(t *testing.T) {
	src := `project: shop
eggs:
  web:
    build: ./web
    replicas: 2
    port: 8080
    env:
      API: "http://${api.address}/v1"
      PRICE: "$$5 and $${HOME}"
      SECRET: "${secret.key}"
    restart: "no"
    depends_on: [api]
  api:
    image: api:1
    port: 9090
    user: "1000:1000"
    health: {}
    volumes: ["data:/data", "./static:/static:ro"]
    resources: {memory: 1536m, cpus: 2}
secrets:
  key: {file: ./key.txt}
volumes:
  data: {}
`
	p, err := Parse([]byte(src), filepath.Join(t.TempDir(), "hatch.yaml"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := roundTrip(t, p)
	want := `project: shop
eggs:
  api:
    image: "api:1"
    user: "1000:1000"
    port: 9090
    health: {}
    resources: {memory: 1536Mi, cpus: 2}
    volumes: ["data:/data", "./static:/static:ro"]
  web:
    build: ./web
    replicas: 2
    port: 8080
    env:
      API: "http://${api.address}/v1"
      PRICE: "$$5 and $${HOME}"
      SECRET: "${secret.key}"
    restart: "no"
    depends_on: [api]
volumes:
  data: {}
secrets:
  key: {file: ./key.txt}
`
	if string(out) != want {
		t.Errorf("Marshal wrote\n%s\nwant\n%s", out, want)
	}
}

// The project's default network is written only when parsing would not add
// it by itself: when it is configured, or when no egg is on it.
func TestMarshalWritesTheDefaultNetworkOnlyWhenNeeded(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		written   bool
	}{
		{"implied", "project: p\neggs:\n  a: {image: x}\n", false},
		{"configured", "project: p\neggs:\n  a: {image: x}\nnetworks:\n  default: {internal: true}\n", true},
		{"unused", "project: p\neggs:\n  a: {image: x, networks: [b]}\nnetworks:\n  default: {}\n  b: {}\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.src), "hatch.yaml", Options{})
			if err != nil {
				t.Fatal(err)
			}
			out, _ := roundTrip(t, p)
			if got := strings.Contains(string(out), "  default:"); got != tc.written {
				t.Errorf("default network written: %v, want %v\n%s", got, tc.written, out)
			}
		})
	}
}

func TestText(t *testing.T) {
	for _, tc := range []struct{ encoded, want string }{
		{"plain", "plain"},
		{"${egg/db.address}", "${db.address}"},
		{"x${secret/api_key.handle}y", "x${secret.api_key}y"},
		{"${volume/data.host}", "${volume.data.host}"},
		{"${network/back.name}", "${network.back.name}"},
		{"$5", "$$5"},
		{"$${HOME}", "$${HOME}"},
		// Read left to right, "$$${" is a literal "$" and a literal "${".
		{"$$${egg/a.hosts}", "$$$${egg/a.hosts}"},
		{"$", "$$"},
	} {
		if got := text(tc.encoded); got != tc.want {
			t.Errorf("text(%q) = %q, want %q", tc.encoded, got, tc.want)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for _, tc := range []struct {
		bytes int64
		want  string
	}{
		{6 << 20, "6Mi"}, {1 << 30, "1Gi"}, {1536 << 20, "1536Mi"}, {3 << 40, "3Ti"},
		{1000, "1000"}, {10 << 10, "10Ki"}, {(6 << 20) + 1, "6291457"},
	} {
		got := formatSize(tc.bytes)
		if got != tc.want {
			t.Errorf("formatSize(%d) = %q, want %q", tc.bytes, got, tc.want)
		}
		if back, err := parseSize(got); err != nil || back != tc.bytes {
			t.Errorf("parseSize(%q) = %d, %v; want %d", got, back, err, tc.bytes)
		}
	}
}

// A project built field by field, as the Compose loader builds one, survives
// writing and parsing, and the parsed one is a fixed point: writing it and
// parsing again changes nothing.
func TestMarshalRoundTripProperty(t *testing.T) {
	dir := t.TempDir()
	rapid.Check(t, func(t *rapid.T) {
		p := drawModel(t, dir)
		out, err := Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		first, err := Parse(out, filepath.Join(dir, "hatch.yaml"), Options{})
		if err != nil {
			t.Fatalf("the output does not load: %v\n%s", err, out)
		}
		checkModel(t, p, first, out)
		again, err := Marshal(first)
		if err != nil {
			t.Fatal(err)
		}
		second, err := Parse(again, filepath.Join(dir, "hatch.yaml"), Options{})
		if err != nil {
			t.Fatalf("the second output does not load: %v\n%s", err, again)
		}
		if diff := resourcesDiff(first, second); diff != "" {
			t.Fatalf("second round trip: %s\n%s", diff, again)
		}
		if !bytes.Equal(out, again) {
			t.Fatalf("not canonical:\n%s\nthen\n%s", out, again)
		}
	})
}

// checkModel compares the drawn model with its parsed output field by field
// where the model has no reference to resolve: everything but placement and
// uses (both follow the references parsing finds).
func checkModel(t *rapid.T, want, got *Project, out []byte) {
	if len(got.Volumes) != len(want.Volumes) {
		t.Fatalf("%d volumes, want %d\n%s", len(got.Volumes), len(want.Volumes), out)
	}
	for i, w := range want.Volumes {
		if !reflect.DeepEqual(w.Backup, got.Volumes[i].Backup) {
			t.Fatalf("volume %s backup\n got: %+v\nwant: %+v\n%s", w.Name, got.Volumes[i].Backup, w.Backup, out)
		}
	}
	if len(got.Eggs) != len(want.Eggs) {
		t.Fatalf("%d eggs, want %d\n%s", len(got.Eggs), len(want.Eggs), out)
	}
	for i, w := range want.Eggs {
		g := got.Eggs[i]
		wi, gi := eggInputsOf(w), eggInputsOf(g)
		wi.Placement, gi.Placement = inputs.Placement{}, inputs.Placement{}
		wi.Uses, gi.Uses = nil, nil
		if !resource.Equal(inputs.Encode(wi), inputs.Encode(gi)) {
			t.Fatalf("egg %s\n got: %v\nwant: %v\n%s", w.Name, inputs.Encode(gi), inputs.Encode(wi), out)
		}
		if fmt.Sprint(w.Routes) != fmt.Sprint(stripLines(g.Routes)) || fmt.Sprint(w.DependsOn) != fmt.Sprint(stripDepLines(g.DependsOn)) {
			t.Fatalf("egg %s routes or depends_on differ: %v %v, want %v %v\n%s", w.Name, g.Routes, g.DependsOn, w.Routes, w.DependsOn, out)
		}
	}
}

// drawBackup draws a valid backup policy, or none; hooks only if the
// volume's egg has a running container for them (running is false for a job).
func drawBackup(t *rapid.T, running bool) *inputs.VolumeBackup {
	if !rapid.Bool().Draw(t, "backup") {
		return nil
	}
	b := &inputs.VolumeBackup{Keep: rapid.IntRange(0, 100).Draw(t, "keep")}
	switch rapid.IntRange(0, 2).Draw(t, "backupSchedule") {
	case 1:
		b.Schedule = &inputs.Schedule{Every: drawFrom(t, "backupEvery", "1m", "6h", "1h30m"), StartingDeadline: drawFrom(t, "backupDeadline", "", "10m")}
	case 2:
		b.Schedule = &inputs.Schedule{Cron: drawFrom(t, "backupCron", "0 3 * * *", "*/5 * * * *", "@daily"), Timezone: drawFrom(t, "backupZone", "", "Europe/Berlin")}
	}
	b.Consistency = drawFrom(t, "consistency", "", "hooks", "stop")
	if running && b.Consistency != "stop" && rapid.Bool().Draw(t, "hooks") {
		b.Before = []string{"sh", "-c", escape(drawFrom(t, "before", "pg_dump > /data/d.sql", "echo ${HOME} $$x", "a: b"))}
		b.After = []string{"rm", "-f", "/data/d.sql"}
	}
	return b
}

func stripLines(rs []Route) []Route {
	out := make([]Route, len(rs))
	for i, r := range rs {
		out[i] = Route{Host: r.Host, Path: r.Path}
	}
	return out
}

func stripDepLines(ds []DependsOn) []DependsOn {
	out := make([]DependsOn, len(ds))
	for i, d := range ds {
		out[i] = DependsOn{Egg: d.Egg, Condition: d.Condition}
	}
	return out
}

// drawModel draws a valid Project the way another loader fills one in: every
// field set directly, strings in the input encoding with references and
// awkward characters, nothing derived. Eggs e0..en-1 depend on and reference
// only earlier ones, all on the default network, each publishing its own port.
func drawModel(t *rapid.T, dir string) *Project {
	p := &Project{Name: "model", File: filepath.Join(dir, "hatch.yaml"), Dir: dir}
	secrets := rapid.IntRange(0, 2).Draw(t, "secrets")
	for i := range secrets {
		s := &Secret{Name: fmt.Sprintf("s_%d", i)}
		if rapid.Bool().Draw(t, "secretFile") {
			s.File = escape(drawFrom(t, "secretFile", "key.txt", "secrets/a b.txt", "/etc/$x", "../up.txt"))
		} else {
			s.Env = drawFrom(t, "secretEnv", "API_KEY", "TOKEN_2")
		}
		p.Secrets = append(p.Secrets, s)
	}
	n := rapid.IntRange(1, 4).Draw(t, "eggs")
	for i := range n {
		e := drawEgg(t, i, secrets)
		if e.Stateful() {
			p.Volumes = append(p.Volumes, &Volume{Name: fmt.Sprintf("v%d", i), Labels: drawMap(t, "volumeLabels"), Backup: drawBackup(t, e.Schedule == nil)})
		}
		p.Eggs = append(p.Eggs, e)
	}
	for _, e := range p.Eggs {
		for i, d := range e.DependsOn {
			if p.Eggs[d.Egg[1]-'0'].Schedule != nil {
				e.DependsOn[i].Condition = "" // nothing of a scheduled egg is awaited
			}
		}
	}
	if rapid.Bool().Draw(t, "configureDefault") {
		p.Networks = append(p.Networks, &Network{Name: DefaultNetwork, Internal: rapid.Bool().Draw(t, "internal"), Labels: drawMap(t, "networkLabels")})
	}
	for i, s := range p.Secrets {
		// A secret no egg uses is a warning, not a problem: keep it used.
		e := p.Eggs[i%len(p.Eggs)]
		if !contains(e.Secrets, s.Name) {
			e.Secrets = append(e.Secrets, s.Name)
		}
	}
	return p
}

func drawEgg(t *rapid.T, i, secrets int) *Egg {
	e := &Egg{
		Name:        fmt.Sprintf("e%d", i),
		Replicas:    rapid.IntRange(0, 4).Draw(t, "replicas"),
		Port:        8000 + i,
		Env:         map[string]string{},
		Labels:      drawMap(t, "labels"),
		Restart:     Restart(drawFrom(t, "restart", "always", "on-failure", "no")),
		StopSignal:  drawFrom(t, "signal", "SIGTERM", "SIGINT", "SIGQUIT"),
		StopTimeout: drawDuration(t, "stopTimeout"),
		Networks:    []string{DefaultNetwork},
		Rollout: Rollout{
			MinReady:         drawDuration(t, "minReady"),
			DrainTimeout:     drawDuration(t, "drainTimeout"),
			ProgressDeadline: time.Duration(rapid.IntRange(1, 600).Draw(t, "deadline")) * time.Second,
			AutoRevert:       rapid.Bool().Draw(t, "autoRevert"),
		},
	}
	if rapid.Bool().Draw(t, "surgeCount") {
		e.Rollout.MaxSurge = Surge{Count: rapid.IntRange(1, 5).Draw(t, "surge")}
	} else {
		e.Rollout.MaxSurge = Surge{Percent: rapid.IntRange(1, 100).Draw(t, "surge")}
	}
	if rapid.Bool().Draw(t, "build") {
		e.Build = &Build{
			Context:    escape(drawFrom(t, "context", "web", ".", "../shared/app", "/srv/$src")),
			Dockerfile: escape(drawFrom(t, "dockerfile", DefaultDockerfile, "Dockerfile.prod", "docker/$x")),
			Args:       drawMap(t, "args"),
			Target:     drawFrom(t, "target", "", "app", "no"),
		}
	} else {
		e.Image = escape(drawFrom(t, "image", "nginx:1.27", "registry.local:5000/a/b@sha256:00", "x$y", "1"))
	}
	for range rapid.IntRange(0, 3).Draw(t, "command") {
		e.Command = append(e.Command, drawText(t, i))
	}
	for range rapid.IntRange(0, 2).Draw(t, "entrypoint") {
		e.Entrypoint = append(e.Entrypoint, drawText(t, i))
	}
	e.User = drawFrom(t, "user", "", "1000:1000", "app", "0")
	e.WorkingDir = escape(drawFrom(t, "workingDir", "", "/srv", "/a b/$c"))
	for k := range rapid.IntRange(0, 3).Draw(t, "env") {
		e.Env[fmt.Sprintf("V%d", k)] = drawText(t, i)
	}
	if rapid.Bool().Draw(t, "ports") {
		e.Ports = []PortMapping{{Published: 10000 + i, Target: e.Port, Protocol: "tcp"}}
	}
	if rapid.Bool().Draw(t, "health") {
		e.Health = &Health{
			Interval:    time.Duration(rapid.IntRange(1, 60).Draw(t, "interval")) * time.Second,
			Timeout:     time.Duration(rapid.IntRange(1, 60).Draw(t, "timeout")) * time.Second,
			StartPeriod: drawDuration(t, "startPeriod"),
			Retries:     rapid.IntRange(1, 10).Draw(t, "retries"),
		}
		switch rapid.IntRange(0, 3).Draw(t, "healthKind") {
		case 1:
			e.Health.HTTP = escape(drawFrom(t, "http", "/healthz", "/a?b=$c"))
		case 2:
			e.Health.TCP = true
		case 3:
			e.Health.Cmd = []string{drawFrom(t, "cmdKind", "CMD", "CMD-SHELL"), drawText(t, i)}
		}
	}
	if rapid.Bool().Draw(t, "routes") {
		e.Routes = []Route{{Host: fmt.Sprintf("e%d.localhost", i), Path: "/"}, {Host: "shared.localhost", Path: escape(fmt.Sprintf("/e%d/$x", i))}}
	}
	if rapid.Bool().Draw(t, "aliases") {
		e.Aliases = []string{fmt.Sprintf("alias-%d", i)}
	}
	if rapid.Bool().Draw(t, "resources") {
		e.Resources = Resources{
			Memory: int64(rapid.IntRange(6, 4096).Draw(t, "memory")) << 20,
			CPUs:   float64(rapid.IntRange(1, 64).Draw(t, "cpus")) / 4,
			Pids:   int64(rapid.IntRange(0, 1000).Draw(t, "pids")),
		}
	}
	if rapid.Bool().Draw(t, "stateful") {
		e.Replicas = rapid.IntRange(0, 1).Draw(t, "replicas")
		e.Volumes = append(e.Volumes, Mount{Type: MountVolume, Source: fmt.Sprintf("v%d", i), Target: "/data", ReadOnly: rapid.Bool().Draw(t, "ro")})
		e.Rollout.Order = StopFirst
	} else {
		e.Rollout.Order = Order(drawFrom(t, "order", string(StartFirst), string(StopFirst)))
	}
	if rapid.Bool().Draw(t, "bind") {
		e.Volumes = append(e.Volumes, Mount{Type: MountBind, Source: escape(drawFrom(t, "bindSource", "/var/run/x.sock", "/tmp/$d", "/tmp/${d}$$")), Target: "/bind"})
	}
	e.Tmpfs = escapeAll(drawList(t, "tmpfs", "/tmp", "/run/$x", "/run/${x}"))
	e.ReadOnly = rapid.Bool().Draw(t, "readOnly")
	e.CapAdd = drawList(t, "capAdd", "NET_ADMIN", "SYS_TIME")
	e.CapDrop = drawList(t, "capDrop", "ALL")
	for s := range secrets {
		if rapid.Bool().Draw(t, "useSecret") {
			e.Secrets = append(e.Secrets, fmt.Sprintf("s_%d", s))
		}
	}
	for j := range i {
		if rapid.Bool().Draw(t, "dependsOn") {
			cond := resource.Condition(drawFrom(t, "condition", "", "healthy"))
			e.DependsOn = append(e.DependsOn, DependsOn{Egg: fmt.Sprintf("e%d", j), Condition: cond})
		}
	}
	e.Placement.Hosts = drawList(t, "hosts", "host-a", "Host_B.lan")
	if i > 0 && rapid.Bool().Draw(t, "scheduled") { // e0's outputs are referenced
		e.Schedule = drawSchedule(t)
		e.Replicas, e.Ports, e.Health, e.Routes = 0, nil, nil, nil
	}
	return e
}

// drawSchedule draws a valid schedule, its durations canonical as the
// loader keeps them.
func drawSchedule(t *rapid.T) *inputs.Schedule {
	s := &inputs.Schedule{}
	if rapid.Bool().Draw(t, "cron") {
		s.Cron = drawFrom(t, "cronExpr", "0 3 * * *", "*/5 * * * *", "@daily", "30 2 * * 1-5")
		s.Timezone = drawFrom(t, "timezone", "", "UTC", "Europe/Berlin", "America/New_York")
	} else {
		s.Every = drawFrom(t, "every", "1s", "5s", "15m", "1h30m", "1.5s")
	}
	s.Concurrency = drawFrom(t, "concurrency", "", "forbid", "allow", "replace")
	s.Timeout = drawFrom(t, "timeout", "", "30s", "1h")
	s.StartingDeadline = drawFrom(t, "startingDeadline", "", "1s", "1h")
	s.KeepRuns = rapid.IntRange(0, 50).Draw(t, "keepRuns")
	return s
}

// drawText draws an encoded string for an egg's env or command: literal
// text that YAML or the encoding could misread, and references to earlier
// eggs and to secrets.
func drawText(t *rapid.T, egg int) string {
	parts := []string{"plain", "a b", "$", "$$", "$${x}", "no", "1.5", "#", "k: v", `"q"`, "'s'", "-flag", "{}", "[x]", "*", ""}
	if egg > 0 {
		parts = append(parts, "${egg/e0.address}", "${egg/e0.hosts}")
	}
	var s string
	for range rapid.IntRange(1, 3).Draw(t, "parts") {
		next := drawFrom(t, "part", parts...)
		if strings.HasSuffix(s, "$") && (strings.HasPrefix(next, "${") || strings.HasPrefix(next, "{")) {
			// "$" then "{" would encode a reference; and a literal "$" right
			// before a reference cannot be expressed (see interpolate).
			continue
		}
		s += next
	}
	return s
}

func drawMap(t *rapid.T, label string) map[string]string {
	m := map[string]string{}
	for k := range rapid.IntRange(0, 2).Draw(t, label) {
		m[fmt.Sprintf("k%d.x/y", k)] = escape(drawFrom(t, label+"Value", "v", "1", "no", "$x", "${y}", ""))
	}
	return m
}

func drawList(t *rapid.T, label string, from ...string) []string {
	var out []string
	for _, v := range from {
		if rapid.Bool().Draw(t, label) {
			out = append(out, v)
		}
	}
	return out
}

func drawDuration(t *rapid.T, label string) time.Duration {
	return time.Duration(rapid.IntRange(0, 3700).Draw(t, label)) * time.Second
}

func drawFrom(t *rapid.T, label string, from ...string) string {
	return rapid.SampledFrom(from).Draw(t, label)
}

// FuzzMarshalRoundTrip: whatever Parse loads, Marshal writes back to the
// same resources. Its seeds (the test projects) run with every go test;
// `go test ./internal/spec -run '^$' -fuzz FuzzMarshalRoundTrip -fuzztime 30s`
// explores further.
func FuzzMarshalRoundTrip(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.yaml")
	for _, s := range append(seeds, "../../examples/shop/hatch.yaml") {
		data, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data, "hatch.yaml", Options{LookupEnv: testEnv})
		if err != nil {
			return
		}
		roundTrip(t, p)
	})
}

func escapeAll(list []string) []string {
	for i, s := range list {
		list[i] = escape(s)
	}
	return list
}

// A route with settings is written in the object form, and reads back the
// same; one without stays a string. Its timeout reaches the route's inputs.
func TestRouteObjectsRoundTrip(t *testing.T) {
	src := "project: shop\neggs:\n  web:\n    image: nginx\n    port: 80\n" +
		"    routes: [shop.localhost, {host: slow.localhost/reports, upstream_timeout: 2m}]\n"
	p, err := Parse([]byte(src), filepath.Join(t.TempDir(), "hatch.yaml"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	routes := p.Eggs[0].Routes
	if len(routes) != 2 || routes[0].UpstreamTimeout != 0 || routes[1].Host != "slow.localhost" || routes[1].Path != "/reports" ||
		routes[1].UpstreamTimeout != 2*time.Minute {
		t.Fatalf("routes %+v", routes)
	}
	out, _ := roundTrip(t, p)
	if !strings.Contains(string(out), "routes: [shop.localhost, {host: slow.localhost/reports, upstream_timeout: 2m}]") {
		t.Errorf("Marshal wrote\n%s", out)
	}
	rs, _ := p.Resources()
	for _, r := range rs {
		if r.Type == resource.Route && r.Name == "slow.localhost/reports" {
			if got := r.Inputs["upstream_timeout"]; got != "2m" {
				t.Errorf("route inputs %v, want upstream_timeout 2m", r.Inputs)
			}
			return
		}
	}
	t.Fatal("no route resource for slow.localhost/reports")
}
