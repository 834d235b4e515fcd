package compose

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/spec"
)

// writeFiles writes files (name -> content) into a fresh directory and
// returns the directory.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func load(t *testing.T, src string, opts Options) *Project {
	t.Helper()
	dir := writeFiles(t, map[string]string{"compose.yaml": src})
	p, err := Load(context.Background(), []string{filepath.Join(dir, "compose.yaml")}, opts)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return p
}

// Bad input gives clear errors that name the service and the key: those of
// compose-go (which loads the files) and those of the mapping, which point
// at the line.
func TestLoadBadInput(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  []string // substrings of the one error
	}{
		{
			name:  "an unknown service in depends_on",
			files: map[string]string{"compose.yaml": "services:\n  web:\n    image: nginx\n    depends_on: [dbb]\n  db: {image: postgres}\n"},
			want:  []string{`service "web" depends on undefined service "dbb"`},
		},
		{
			name:  "a cycle",
			files: map[string]string{"compose.yaml": "services:\n  a: {image: x, depends_on: [b]}\n  b: {image: x, depends_on: [c]}\n  c: {image: x, depends_on: [a]}\n"},
			want:  []string{"dependency cycle detected: a -> b -> c -> a"},
		},
		{
			name:  "a missing env_file",
			files: map[string]string{"compose.yaml": "services:\n  web:\n    image: nginx\n    env_file: [web.env]\n"},
			want:  []string{`service "web" env_file:`, "web.env not found"},
		},
		{
			name:  "an invalid duration",
			files: map[string]string{"compose.yaml": "services:\n  web:\n    image: nginx\n    stop_grace_period: 10 parsecs\n"},
			want:  []string{"services[web].stop_grace_period", `unknown unit " parsecs"`},
		},
		{
			name:  "an invalid healthcheck interval",
			files: map[string]string{"compose.yaml": "services:\n  web:\n    image: nginx\n    healthcheck: {test: [CMD, x], interval: 5}\n"},
			want:  []string{"services.web.healthcheck.interval must be a string"},
		},
		{
			name:  "a required variable that is not set",
			files: map[string]string{"compose.yaml": "services:\n  web:\n    image: \"nginx:${TAG:?set TAG}\"\n"},
			want:  []string{"services.web.image", "required variable TAG is missing a value: set TAG"},
		},
		{
			name:  "a file that is not YAML",
			files: map[string]string{"compose.yaml": "services:\n  web: [\n"},
			want:  []string{"compose.yaml"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeFiles(t, tc.files)
			perr, err := mustFail(t, []string{filepath.Join(dir, "compose.yaml")}, Options{})
			if perr != nil {
				t.Fatalf("want compose-go's error, got %v", perr)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// Problems found by the mapping, or in the converted project, are listed
// at the line of the Compose setting they come from.
func TestLoadProblemsAtTheirLines(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string // "line: substring", in order
	}{
		{
			name: "a stateful service with several replicas",
			src:  "services:\n  db:\n    image: postgres\n    volumes: [data:/data]\n    deploy:\n      replicas: 3\nvolumes:\n  data:\n",
			want: []string{`6: egg "db" mounts volume "data", so it runs at most one replica`},
		},
		{
			name: "a reference to an output of something undefined",
			src:  "services:\n  web:\n    image: nginx\n    environment:\n      DB: \"$${db.adress}\"\n  db: {image: postgres}\n",
			want: []string{`5: service "web" environment.DB: $${db.adress}: a service's outputs are address (host:port) and hosts`},
		},
		{
			name: "a reference to a secret that is not defined",
			src:  "services:\n  web:\n    image: nginx\n    command: [\"--key=$${secret.nope}\"]\n",
			want: []string{`4: service "web" command: $${secret.nope}: no secret "nope" is defined`},
		},
		{
			name: "an address reference to a service without a port",
			src:  "services:\n  web:\n    image: nginx\n    environment: {DB: \"$${db.address}\"}\n  db: {image: postgres}\n",
			want: []string{`4: egg "web" references ${db.address}, but egg "db" has no port`},
		},
		{
			name: "routes without a port",
			src:  "services:\n  web:\n    image: nginx\n    x-hatch:\n      routes: [web.localhost]\n",
			want: []string{`5: service "web" x-hatch.routes: the service has routes but no port`},
		},
		{
			name: "a bad x-hatch route object",
			src:  "services:\n  web:\n    image: nginx\n    ports: [\"80\"]\n    x-hatch:\n      routes: [{host: a.example.com, tls: sometimes}]\n",
			want: []string{`6: service "web" x-hatch.routes: tls of a.example.com must be auto or off`},
		},
		{
			name: "an unknown x-hatch key",
			src:  "services:\n  web:\n    image: nginx\n    x-hatch:\n      rutes: [web.localhost]\n",
			want: []string{`4: service "web" x-hatch: unknown key "rutes"`},
		},
		{
			name: "services that collide once mapped",
			src:  "services:\n  my_db: {image: a}\n  my-db: {image: b}\n",
			want: []string{`1: services "my-db" and "my_db" both become "my-db"`},
		},
		{
			name: "a reserved service name",
			src:  "services:\n  secret: {image: a}\n",
			want: []string{`1: service "secret": the name "secret" is reserved`},
		},
		{
			name: "an external secret",
			src:  "services:\n  web: {image: a, secrets: [key]}\nsecrets:\n  key: {external: true}\n",
			want: []string{`4: secret "key" is external`},
		},
		{
			name: "Hatchery's own label prefix",
			src:  "services:\n  web:\n    image: a\n    labels: {io.hatchery.egg: evil}\n",
			want: []string{`4: egg "web" labels: "io.hatchery.egg" uses Hatchery's own prefix`},
		},
		{
			name: "a bad cron expression in x-hatch.schedule, with robfig's reason",
			src:  "services:\n  job:\n    image: busybox\n    x-hatch:\n      schedule:\n        cron: \"61 * * * *\"\n",
			want: []string{`5: egg "job" schedule: cron: "61 * * * *": end of range (61) above maximum (59)`},
		},
		{
			name: "an unknown zone and a long deadline in x-hatch.schedule",
			src:  "services:\n  job:\n    image: busybox\n    x-hatch:\n      schedule: {cron: \"0 3 * * *\", timezone: Mars/Olympus, starting_deadline: 2h}\n",
			want: []string{`5: timezone: "Mars/Olympus" is not a time zone`, `5: starting_deadline: 2h is longer than 1h`},
		},
		{
			name: "keep_runs 0 in x-hatch.schedule",
			src:  "services:\n  job:\n    image: busybox\n    x-hatch:\n      schedule: {cron: \"0 3 * * *\", every: 1m, keep_runs: 0}\n",
			want: []string{`5: service "job" x-hatch.schedule: keep_runs: 0 must be a whole number of runs, at least 1`},
		},
		{
			name: "both cron and every in x-hatch.schedule",
			src:  "services:\n  job:\n    image: busybox\n    x-hatch:\n      schedule: {cron: \"0 3 * * *\", every: 1m}\n",
			want: []string{`5: either cron or every, not both`},
		},
		{
			name: "an unknown key of x-hatch.schedule",
			src:  "services:\n  job:\n    image: busybox\n    x-hatch:\n      schedule: {every: 1m, retries: 3}\n",
			want: []string{`5: service "job" x-hatch.schedule: unknown key "retries": a schedule has concurrency, cron, every, starting_deadline, timeout, timezone and keep_runs`},
		},
		{
			name: "a scheduled service with replicas and published ports",
			src:  "services:\n  job:\n    image: busybox\n    ports: [\"8080:80\"]\n    deploy:\n      replicas: 2\n    x-hatch:\n      schedule: {every: 1m}\n",
			want: []string{`4: egg "job" has a schedule and ports: a scheduled egg cannot have ports, since it has no long-running replica`, `6: egg "job" has a schedule and replicas`},
		},
		{
			name: "a build from a git repository",
			src:  "services:\n  web:\n    build: https://github.com/acme/web.git#main\n",
			want: []string{`3: service "web" build.context: "https://github.com/acme/web.git#main" is not a local directory`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeFiles(t, map[string]string{"compose.yaml": tc.src})
			file := filepath.Join(dir, "compose.yaml")
			perr, err := mustFail(t, []string{file}, Options{})
			if err != nil {
				t.Fatalf("want problems with lines, got %v", err)
			}
			if len(perr.Errors) != len(tc.want) {
				t.Fatalf("%d errors, want %d:\n%v", len(perr.Errors), len(tc.want), perr)
			}
			for i, w := range tc.want {
				line, text, _ := strings.Cut(w, ": ")
				got := perr.Errors[i]
				if got.File != file || !strings.HasPrefix(got.String(), file+":"+line+": ") || !strings.Contains(got.Message, text) {
					t.Errorf("error %d = %q, want line %s and %q", i, got, line, text)
				}
			}
		})
	}
}

// --strict turns every warning into an error.
func TestStrict(t *testing.T) {
	src := "services:\n  web:\n    image: nginx\n    privileged: true\n    restart: on-failure:3\n"
	p := load(t, src, Options{})
	if len(p.Warnings) != 2 {
		t.Fatalf("warnings %v, want privileged and the restart count", p.Warnings)
	}
	dir := writeFiles(t, map[string]string{"compose.yaml": src})
	perr, err := mustFail(t, []string{filepath.Join(dir, "compose.yaml")}, Options{Strict: true})
	if err != nil || len(perr.Errors) != 2 || len(perr.Warnings) != 0 {
		t.Fatalf("strict: %v %v", perr, err)
	}
	for i, want := range []string{`service "web" privileged: not supported`, `service "web" restart: the limit of 3 restarts`} {
		if !strings.Contains(perr.Errors[i].Message, want) {
			t.Errorf("error %d = %q, want %q", i, perr.Errors[i].Message, want)
		}
	}
}

// The same project written as a compose.yaml and as a hatch.yaml gives the
// same resources.
func TestComposeAndHatchYAMLGiveTheSameResources(t *testing.T) {
	compose := `
services:
  web:
    build: ./web
    ports: ["8088:8080"]
    environment:
      API_URL: "http://$${api.address}"
      KEY: "$${secret.api_key}"
    depends_on:
      api: {condition: service_healthy}
    deploy:
      replicas: 3
      update_config: {parallelism: 1, monitor: 2s, failure_action: rollback}
      resources: {limits: {memory: 128M, cpus: "0.25"}}
    secrets: [api_key]
    x-hatch: {routes: [shop.localhost]}
  api:
    image: api:1
    expose: ["9090"]
    volumes: [data:/data]
    stop_signal: SIGINT
    stop_grace_period: 30s
volumes:
  data: {}
secrets:
  api_key: {file: ./api_key.txt}
`
	hatch := `
project: shop
eggs:
  web:
    build: ./web
    replicas: 3
    port: 8080
    ports: ["8088:8080"]
    env:
      API_URL: "http://${api.address}"
      KEY: "${secret.api_key}"
    routes: [shop.localhost]
    rollout: {max_surge: 1, min_ready: 2s, auto_revert: true}
    resources: {memory: 128Mi, cpus: 0.25}
    secrets: [api_key]
    depends_on:
      api: {condition: healthy}
  api:
    image: api:1
    port: 9090
    volumes: ["data:/data"]
    stop_signal: SIGINT
    stop_timeout: 30s
volumes:
  data: {}
secrets:
  api_key: {file: ./api_key.txt}
`
	dir := writeFiles(t, map[string]string{"compose.yaml": compose, "hatch.yaml": hatch})
	fromCompose, err := Load(context.Background(), []string{filepath.Join(dir, "compose.yaml")}, Options{Environ: []string{"COMPOSE_PROJECT_NAME=shop"}})
	if err != nil {
		t.Fatal(err)
	}
	fromHatch, err := spec.Load(filepath.Join(dir, "hatch.yaml"), spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sameResources(t, fromHatch, fromCompose.Project)
}

// Several -f files merge as Compose merges them, .env and the environment
// interpolate (the environment winning), and profiles select services.
func TestLoadingIsCompose(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"compose.yaml":          "services:\n  web:\n    image: \"web:${TAG}\"\n    environment: {LEVEL: \"${LEVEL}\"}\n  debug:\n    image: busybox\n    profiles: [debug]\n",
		"compose.override.yaml": "services:\n  web:\n    deploy: {replicas: 2}\n",
		".env":                  "TAG=1.0\nLEVEL=info\n",
	})
	files := []string{filepath.Join(dir, "compose.yaml"), filepath.Join(dir, "compose.override.yaml")}
	p, err := Load(context.Background(), files, Options{Environ: []string{"LEVEL=debug"}, Profiles: []string{"debug"}})
	if err != nil {
		t.Fatal(err)
	}
	web, ok := p.Egg("web")
	if !ok || web.Image != "web:1.0" || web.Env["LEVEL"] != "debug" || web.Replicas != 2 {
		t.Fatalf("web = %+v", web)
	}
	if _, ok := p.Egg("debug"); !ok {
		t.Error("the debug profile is enabled, but its service is not an egg")
	}
	if p.Name != filepath.Base(dir) && p.Name != projectName(strings.ToLower(filepath.Base(dir))) {
		t.Errorf("project %q, want the directory's name", p.Name)
	}

	p, err = Load(context.Background(), files, Options{Environ: []string{"COMPOSE_DISABLE_ENV_FILE=true", "TAG=2", "LEVEL=x"}})
	if err != nil {
		t.Fatal(err)
	}
	if web, _ := p.Egg("web"); web.Image != "web:2" {
		t.Errorf("with the .env file disabled, image %q", web.Image)
	}
	if _, ok := p.Egg("debug"); ok {
		t.Error("no profile is enabled, but the debug service is an egg")
	}
}

// A service other services wait to complete is a one-shot job unless it
// says how it restarts; restart and deploy.restart_policy map to policies.
func TestRestart(t *testing.T) {
	p := load(t, `services:
  app:
    image: app
    depends_on: {migrate: {condition: service_completed_successfully}}
  migrate: {image: app}
  cron: {image: app, restart: "no"}
  flaky: {image: app, restart: on-failure}
  always: {image: app, restart: unless-stopped}
  swarm: {image: app, restart: always, deploy: {restart_policy: {condition: none}}}
`, Options{})
	for egg, want := range map[string]spec.Restart{
		"app": spec.RestartAlways, "migrate": spec.RestartNo, "cron": spec.RestartNo,
		"flaky": spec.RestartOnFailure, "always": spec.RestartAlways, "swarm": spec.RestartNo,
	} {
		if e, _ := p.Egg(egg); e.Restart != want {
			t.Errorf("egg %s restarts %q, want %q", egg, e.Restart, want)
		}
	}
}

func TestDependsOnConditions(t *testing.T) {
	p := load(t, `services:
  app:
    image: app
    depends_on:
      a: {condition: service_started}
      b: {condition: service_healthy}
      c: {condition: service_completed_successfully}
  a: {image: x}
  b: {image: x}
  c: {image: x}
`, Options{})
	app, _ := p.Egg("app")
	want := []spec.DependsOn{{Egg: "a"}, {Egg: "b", Condition: resource.ConditionHealthy}, {Egg: "c", Condition: resource.ConditionCompleted}}
	if len(app.DependsOn) != len(want) {
		t.Fatalf("depends_on %v", app.DependsOn)
	}
	for i, d := range app.DependsOn {
		if d.Egg != want[i].Egg || d.Condition != want[i].Condition {
			t.Errorf("depends_on[%d] = %+v, want %+v", i, d, want[i])
		}
	}
}

func TestIsComposeFile(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"project.yaml": "services:\n  web: {image: nginx}\n",
		"hatch.yaml":   "project: p\neggs:\n  web: {image: nginx}\n",
		"stack.yml":    "project: p\neggs:\n  web: {image: nginx}\n",
		"broken.yaml":  "services: [\n",
	})
	for _, tc := range []struct {
		path string
		want bool
	}{
		{"compose.yaml", true}, {"compose.yml", true}, {"docker-compose.yml", true},
		{"docker-compose.override.yaml", true}, {"compose.prod.yaml", true}, {"/x/y/compose-dev.yml", true},
		{filepath.Join(dir, "project.yaml"), true},
		{filepath.Join(dir, "hatch.yaml"), false},
		{filepath.Join(dir, "stack.yml"), false},
		{filepath.Join(dir, "broken.yaml"), false},
		{filepath.Join(dir, "absent.yaml"), false},
		{"composer.yaml", false},
	} {
		if got := IsComposeFile(tc.path); got != tc.want {
			t.Errorf("IsComposeFile(%s) = %v, want %v", tc.path, got, tc.want)
		}
	}
}

// What apply reads is checked at the lines of the Compose file: a build
// context and a secret's file that do not exist.
func TestCheckSourcesAtComposeLines(t *testing.T) {
	src := "services:\n  web:\n    build: ./web\n    secrets: [key]\n  db: {image: postgres}\nsecrets:\n  key:\n    file: ./key.txt\n"
	dir := writeFiles(t, map[string]string{"compose.yaml": src})
	file := filepath.Join(dir, "compose.yaml")
	p, err := Load(context.Background(), []string{file}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	problems := p.CheckSources(spec.Environment{LookupEnv: func(string) (string, bool) { return "", false }, Stat: os.Stat})
	want := []string{
		file + `:3: egg "web" build: the context ` + filepath.Join(dir, "web") + " does not exist",
		file + `:7: secret "key": its file ` + filepath.Join(dir, "key.txt") + " does not exist",
	}
	if len(problems) != len(want) {
		t.Fatalf("problems %v, want %d", problems, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(problems[i].String(), w) {
			t.Errorf("problem %d = %q, want %q", i, problems[i], w)
		}
	}
}

// The egg's port is x-hatch's, else the first tcp port's target, else the
// first exposed port; only published tcp ports are published.
func TestPorts(t *testing.T) {
	p := load(t, `services:
  a:
    image: x
    ports: ["9999:53/udp", "8080:80", "443"]
  b:
    image: x
    expose: ["5432/tcp", "6000"]
  c:
    image: x
    ports: ["8081:80"]
    x-hatch: {port: 9090, routes: [c.localhost, "c.localhost/api"]}
`, Options{})
	for _, tc := range []struct {
		egg   string
		port  int
		ports []spec.PortMapping
	}{
		{"a", 80, []spec.PortMapping{{Published: 8080, Target: 80, Protocol: "tcp"}}},
		{"b", 5432, nil},
		{"c", 9090, []spec.PortMapping{{Published: 8081, Target: 80, Protocol: "tcp"}}},
	} {
		e, _ := p.Egg(tc.egg)
		var ports []spec.PortMapping
		for _, pm := range e.Ports {
			ports = append(ports, spec.PortMapping{Published: pm.Published, Target: pm.Target, Protocol: pm.Protocol})
		}
		if e.Port != tc.port || fmt.Sprint(ports) != fmt.Sprint(tc.ports) {
			t.Errorf("egg %s: port %d, ports %v; want %d, %v", tc.egg, e.Port, ports, tc.port, tc.ports)
		}
	}
	c, _ := p.Egg("c")
	if len(c.Routes) != 2 || c.Routes[0].Name() != "c.localhost" || c.Routes[1].Name() != "c.localhost/api" {
		t.Errorf("routes %v", c.Routes)
	}
	var warned []string
	for _, w := range p.Warnings {
		warned = append(warned, w.Message)
	}
	for _, want := range []string{"9999:53/udp is not published", "443 has no published port"} {
		if !strings.Contains(strings.Join(warned, "\n"), want) {
			t.Errorf("no warning says %q: %v", want, warned)
		}
	}
}

// pull_policy maps to the egg's pull: always and missing (if_not_present)
// as they are, refresh and none to the default (digest), never to missing
// with a warning, since a host lacking the image pulls it.
func TestPullPolicy(t *testing.T) {
	p := load(t, `services:
  pinned: {image: app}
  refresh: {image: app, pull_policy: refresh}
  fresh: {image: app, pull_policy: always}
  local: {image: app, pull_policy: missing}
  present: {image: app, pull_policy: if_not_present}
  never: {image: app, pull_policy: never}
`, Options{})
	for egg, want := range map[string]contract.PullPolicy{
		"pinned": "", "refresh": "", "fresh": contract.PullAlways, "local": contract.PullMissing,
		"present": contract.PullMissing, "never": contract.PullMissing,
	} {
		if e, _ := p.Egg(egg); e.Pull != want {
			t.Errorf("egg %s pulls %q, want %q", egg, e.Pull, want)
		}
	}
	var warned []string
	for _, w := range p.Warnings {
		warned = append(warned, w.Message)
	}
	if len(warned) != 1 || !strings.Contains(warned[0], `service "never" pull_policy: never is mapped to pull: missing`) {
		t.Errorf("warnings %q, want one about never", warned)
	}
}
