package spec

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/resource"
)

// want is one expected diagnostic: on the line holding `at` (which must occur
// on exactly one line of the file), saying every one of words.
type want struct {
	at    string
	words []string
}

func lineOf(t *testing.T, src, at string) int {
	t.Helper()
	line := 0
	for i, l := range strings.Split(src, "\n") {
		if strings.Contains(l, at) {
			if line != 0 {
				t.Fatalf("marker %q is on lines %d and %d: make it unique", at, line, i+1)
			}
			line = i + 1
		}
	}
	if line == 0 {
		t.Fatalf("marker %q is not in the file", at)
	}
	return line
}

func testEnv(name string) (string, bool) {
	v, ok := map[string]string{"REGION": "us", "TAG": "1.2"}[name]
	return v, ok
}

func parse(src string) (*Project, error) {
	return Parse([]byte(src), "hatch.yaml", Options{LookupEnv: testEnv})
}

// checkDiagnostics asserts that got holds exactly the wanted diagnostics, in
// line order, each in file:line form with its words.
func checkDiagnostics(t *testing.T, src string, got []Diagnostic, wants []want) {
	t.Helper()
	if len(got) != len(wants) {
		t.Errorf("got %d diagnostics, want %d:", len(got), len(wants))
		for _, d := range got {
			t.Errorf("  %s", d)
		}
		return
	}
	for i, w := range wants {
		d := got[i]
		if line := lineOf(t, src, w.at); d.Line != line || d.File != "hatch.yaml" {
			t.Errorf("diagnostic %d is at %s:%d, want hatch.yaml:%d (the line of %q): %s", i, d.File, d.Line, line, w.at, d.Message)
		}
		for _, word := range w.words {
			if !strings.Contains(d.Message, word) {
				t.Errorf("diagnostic %d does not say %q: %s", i, word, d)
			}
		}
	}
}

func TestParseReportsErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []want
	}{
		{
			name: "an unknown field names the closest one",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    replica: 3\n",
			want: []want{{"replica:", []string{`egg "web": unknown field "replica"`, `did you mean "replicas"?`}}},
		},
		{
			name: "an unknown field far from any lists the valid ones",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    zzzzzzzz: 3\n",
			want: []want{{"zzzzzzzz:", []string{`unknown field "zzzzzzzz"`, "valid fields are aliases, build, cap_add"}}},
		},
		{
			name: "a Compose field name gets a precise hint",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    environment: {A: b}\n",
			want: []want{{"environment:", []string{`unknown field "environment"`, `"env"`}}},
		},
		{
			name: "an unknown top-level field",
			src:  "project: shop\negs:\n  web: {image: nginx}\n",
			want: []want{
				{"project: shop", []string{"no eggs"}},
				{"egs:", []string{`unknown field "egs" at the top`, `did you mean "eggs"?`}},
			},
		},
		{
			name: "no project name",
			src:  "eggs:\n  web: {image: nginx}\n",
			want: []want{{"eggs:", []string{"no project: name", `"project: shop"`}}},
		},
		{
			name: "a bad project name",
			src:  "project: Shop\neggs:\n  web: {image: nginx}\n",
			want: []want{{"project:", []string{`project name "Shop"`, "lower-case letters, digits or hyphens"}}},
		},
		{
			name: "a bad egg name",
			src:  "project: shop\neggs:\n  Web_1: {image: nginx}\n  ok: {image: nginx}\n",
			want: []want{{"Web_1", []string{`egg name "Web_1" must be 1 to 40 lower-case letters`}}},
		},
		{
			name: "a reserved egg name",
			src:  "project: shop\neggs:\n  volume: {image: nginx}\n",
			want: []want{{"volume:", []string{`egg name "volume" is reserved`, "rename"}}},
		},
		{
			name: "an egg name too long",
			src:  "project: shop\neggs:\n  " + strings.Repeat("a", 41) + ": {image: nginx}\n",
			want: []want{{"aaaa", []string{"1 to 40"}}},
		},
		{
			name: "both build and image",
			src:  "project: shop\neggs:\n  web:\n    build: ./web\n    image: nginx\n",
			want: []want{{"image: nginx", []string{`egg "web" has both build: and image:`}}},
		},
		{
			name: "neither build nor image",
			src:  "project: shop\neggs:\n  web:\n    replicas: 2\n",
			want: []want{{"web:", []string{`egg "web" needs build:`, "or image:"}}},
		},
		{
			name: "a duration without a unit",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    stop_timeout: 10\n",
			want: []want{{"stop_timeout", []string{`egg "web" stop_timeout`, `"10" has no unit`, "10s"}}},
		},
		{
			name: "a duration that is no duration",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    rollout: {drain_timeout: ten seconds}\n",
			want: []want{{"drain_timeout", []string{"rollout.drain_timeout", `"ten seconds" is not a duration`, "1m30s"}}},
		},
		{
			name: "a negative duration",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    stop_timeout: -5s\n",
			want: []want{{"stop_timeout", []string{"must be at least 0s"}}},
		},
		{
			name: "a bad memory size",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    resources: {memory: 256Mo}\n",
			want: []want{{"memory", []string{"resources.memory", `"256Mo" is not a size`, "256Mi"}}},
		},
		{
			name: "a memory size below Docker's minimum",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    resources: {memory: 1Mi}\n",
			want: []want{{"memory", []string{"below Docker's minimum of 6Mi"}}},
		},
		{
			name: "bad cpus and pids",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    resources:\n      cpus: 0\n      pids: many\n",
			want: []want{
				{"cpus", []string{"resources.cpus", "number of cores above 0"}},
				{"pids", []string{"resources.pids", "whole number of processes"}},
			},
		},
		{
			name: "bad port mappings",
			src: "project: shop\neggs:\n  web:\n    image: nginx\n    ports:\n" +
				"      - \"8080\"\n      - 1.2.3.4:80:80\n      - 81:81/udp\n      - x:80\n      - 82:82/tcp\n",
			want: []want{
				{`"8080"`, []string{`port mapping "8080" needs the published port`, `"8080:8080"`}},
				{"1.2.3.4", []string{"a host address cannot be given here", "--publish-addr"}},
				{"81:81/udp", []string{"udp is not supported yet"}},
				{"x:80", []string{`write "published:target"`, "1 to 65535"}},
			},
		},
		{
			name: "a port out of range",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    port: 70000\n",
			want: []want{{"port:", []string{`egg "web" port must be between 1 and 65535, not 70000`}}},
		},
		{
			name: "bad replicas",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    replicas: -1\n  api:\n    image: nginx\n    replicas: three\n",
			want: []want{
				{"replicas: -1", []string{"between 0 and 10000, not -1"}},
				{"replicas: three", []string{`egg "api" replicas must be a whole number, not "three"`}},
			},
		},
		{
			name: "a stateful egg with several replicas",
			src:  "project: shop\neggs:\n  db:\n    image: postgres\n    replicas: 3\n    volumes: [\"pgdata:/data\"]\nvolumes:\n  pgdata: {}\n",
			want: []want{{"replicas: 3", []string{`egg "db" mounts volume "pgdata"`, "one replica", "not 3", "replicas: 1"}}},
		},
		{
			name: "start-first with a volume",
			src:  "project: shop\neggs:\n  db:\n    image: postgres\n    volumes: [\"pgdata:/data\"]\n    rollout: {order: start-first}\nvolumes:\n  pgdata: {}\n",
			want: []want{{"order: start-first", []string{`egg "db" mounts volume "pgdata"`, "stop-first", "remove rollout.order"}}},
		},
		{
			name: "a bad order on a stateful egg is reported once",
			src:  "project: shop\neggs:\n  db:\n    image: postgres\n    volumes: [\"pgdata:/data\"]\n    rollout: {order: first}\nvolumes:\n  pgdata: {}\n",
			want: []want{{"order: first", []string{`"first" is not an order`}}},
		},
		{
			name: "an undefined egg in depends_on",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    depends_on: [db]\n",
			want: []want{{"depends_on", []string{`egg "web" depends on "db", which is not defined`}}},
		},
		{
			name: "an undefined egg in depends_on, with a close name",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    depends_on:\n      dbb: {condition: healthy}\n  db:\n    image: postgres\n",
			want: []want{{"dbb:", []string{`egg "web" depends on "dbb", which is not defined: did you mean "db"?`}}},
		},
		{
			name: "an egg depending on itself",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    depends_on: [web]\n",
			want: []want{{"depends_on", []string{`egg "web" depends on itself`}}},
		},
		{
			name: "an undefined volume, network and secret",
			src: "project: shop\neggs:\n  web:\n    image: nginx\n    volumes: [\"data:/data\"]\n" +
				"    networks: [front]\n    secrets: [api_key]\n",
			want: []want{
				{"volumes:", []string{`egg "web" mounts volume "data", which is not defined`, "add it under volumes:"}},
				{"networks:", []string{`egg "web" is on network "front", which is not defined`}},
				{"secrets:", []string{`egg "web" uses secret "api_key", which is not defined`}},
			},
		},
		{
			name: "a reference to an undefined egg",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    env:\n      DB: \"${dbb.address}\"\n  db: {image: postgres, port: 5432}\n",
			want: []want{{"DB:", []string{`egg "web" env DB`, `${dbb.address} refers to egg "dbb", which is not defined`, `did you mean "db"?`}}},
		},
		{
			name: "an unknown output",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    command: [\"/app\", \"${db.port}\"]\n  db: {image: postgres, port: 5432}\n",
			want: []want{{"command:", []string{`egg "web" command`, `egg "db" has no output "port"`, "address and hosts"}}},
		},
		{
			name: "an output where it cannot be known yet",
			src:  "project: shop\neggs:\n  web:\n    image: \"${db.address}\"\n  db: {image: postgres, port: 5432}\n",
			want: []want{{"image: \"", []string{`egg "web" image`, "known only at deploy time"}}},
		},
		{
			name: "an unset variable without a default",
			src:  "project: shop\neggs:\n  web:\n    image: \"nginx:${env.NGINX_TAG}\"\n",
			want: []want{{"image:", []string{"NGINX_TAG is not set", "${env.NGINX_TAG:-value}"}}},
		},
		{
			name: "an unclosed reference",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    env: {A: \"${db.address\"}\n",
			want: []want{{"env:", []string{`unclosed "${"`}}},
		},
		{
			name: "a reference to an egg's address without a port",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    env: {DB: \"${db.address}\"}\n  db: {image: postgres}\n",
			want: []want{{"env:", []string{`egg "web" references ${db.address}, but egg "db" has no port`}}},
		},
		{
			name: "a reference to an egg on other networks",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    networks: [front]\n    env: {DB: \"${db.address}\"}\n  db: {image: postgres, port: 5432, networks: [back]}\nnetworks: {front: {}, back: {}}\n",
			want: []want{{"env:", []string{`egg "web" references ${db.address}, but is on no network of egg "db" (back)`}}},
		},
		{
			name: "a reference to its own address",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    port: 80\n    env: {SELF: \"${web.address}\"}\n",
			want: []want{{"SELF", []string{`egg "web" references its own address`}}},
		},
		{
			name: "a route claimed twice",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    port: 80\n    routes: [shop.localhost]\n  api:\n    image: nginx\n    port: 80\n    routes: [api.localhost, \"shop.localhost/\"]\n",
			want: []want{{"api.localhost,", []string{`route shop.localhost of egg "api" is already claimed by egg "web" (line 6)`}}},
		},
		{
			name: "a published port claimed twice",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    ports: [\"8080:80\"]\n  api:\n    image: nginx\n    ports: [\"8080:9090\"]\n",
			want: []want{{"8080:9090", []string{`port 8080 of egg "api" is already published by egg "web" (line 5)`}}},
		},
		{
			name: "a volume mounted by two eggs",
			src: "project: shop\neggs:\n  db:\n    image: postgres\n    volumes: [\"pgdata:/data\"]\n" +
				"  backup:\n    image: backup\n    volumes: [\"pgdata:/backup:ro\"]\nvolumes:\n  pgdata: {}\n",
			want: []want{{"/backup", []string{`volume "pgdata" is already mounted by egg "db"`, "one volume, one writer"}}},
		},
		{
			name: "an alias that is another egg's name",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    aliases: [api]\n  api: {image: nginx}\n",
			want: []want{{"aliases:", []string{`alias "api" of egg "web" is already egg "api"`}}},
		},
		{
			name: "labels with Hatchery's prefix",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    labels:\n      team: shop\n      io.hatchery.egg: other\n",
			want: []want{{"io.hatchery.egg", []string{`"io.hatchery.egg" uses Hatchery's own prefix`, "rename"}}},
		},
		{
			name: "a dependency cycle",
			src: "project: shop\neggs:\n  api:\n    image: nginx\n    port: 80\n    depends_on: [web]\n" +
				"  web:\n    image: nginx\n    port: 80\n    env: {API: \"${api.address}\"}\n",
			want: []want{{"api:", []string{`dependency cycle: egg "api" -> egg "web" -> egg "api"`}}},
		},
		{
			name: "waiting for an egg that never completes",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    depends_on:\n      migrate: {condition: completed}\n  migrate: {image: migrate}\n",
			want: []want{{"migrate: {condition", []string{`egg "web" waits for "migrate" to complete`, "restart: no"}}},
		},
		{
			name: "Compose's condition names",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    depends_on:\n      db: {condition: service_healthy}\n  db: {image: postgres}\n",
			want: []want{{"service_healthy", []string{`condition "service_healthy" is Compose's: write healthy`}}},
		},
		{
			name: "routes without a port",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    routes: [shop.localhost]\n",
			want: []want{{"routes:", []string{`egg "web" has routes but no port`}}},
		},
		{
			name: "bad routes",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    port: 80\n    routes:\n      - Shop.localhost\n      - shop.localhost:8080\n      - \"-bad-.localhost\"\n",
			want: []want{
				{"Shop.localhost", []string{"hostnames are lower-case", `"shop.localhost"`}},
				{"shop.localhost:8080", []string{"a route has no port", `"shop.localhost"`}},
				{"-bad-", []string{"is not a hostname"}},
			},
		},
		{
			name: "bad route objects",
			src: "project: shop\neggs:\n  web:\n    image: nginx\n    port: 80\n    routes:\n      - {host: a.localhost, upstream_timeout: 30}\n" +
				"      - {upstream_timeout: 30s}\n      - {host: b.localhost, timeout: 5s}\n      - {host: c.localhost, upstream_timeout: 1ms}\n",
			want: []want{
				{"upstream_timeout: 30}", []string{`routes[0].upstream_timeout: "30" has no unit`, "30s"}},
				{"{upstream_timeout: 30s}", []string{"routes[1] has no host", "{host: shop.localhost, upstream_timeout: 30s}"}},
				{"timeout: 5s}", []string{`routes[2]: unknown field "timeout"`, "upstream_timeout"}},
				{"upstream_timeout: 1ms}", []string{"routes[3].upstream_timeout must be at least 10ms"}},
			},
		},
		{
			name: "health checks",
			src: "project: shop\neggs:\n  web:\n    image: nginx\n    health:\n      http: healthz\n      tcp: true\n" +
				"  api:\n    image: nginx\n    port: 80\n    health: {cmd: [\"/app\", \"-check\"], retries: 0}\n  db:\n    image: postgres\n    port: 5432\n    health: {tcp: false}\n",
			want: []want{
				{"http: healthz", []string{`"healthz" must be a path starting with /`}},
				{"http: healthz", []string{`egg "web" checks its health on its port but has no port`}},
				{"tcp: true", []string{`egg "web" health has http and tcp: keep one`}},
				{"cmd:", []string{`health.cmd must start with "CMD"`}},
				{"cmd:", []string{"health.retries must be between 1 and 100, not 0"}},
				{"tcp: false", []string{"false means nothing here"}},
			},
		},
		{
			name: "a command written as a string",
			src:  "project: shop\neggs:\n  web:\n    image: node\n    command: npm start\n",
			want: []want{{"command:", []string{`egg "web" command must be a list`, `write ["npm", "start"]`}}},
		},
		{
			name: "restart policies",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    restart: unless-stopped\n  api:\n    image: nginx\n    restart: sometimes\n",
			want: []want{
				{"unless-stopped", []string{"is Compose's; write always"}},
				{"sometimes", []string{`"sometimes" is not a restart policy`, "always", "on-failure", "no (a one-shot job)"}},
			},
		},
		{
			name: "rollout settings",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    rollout:\n      order: blue-green\n      max_surge: 150%\n      progress_deadline: 0s\n",
			want: []want{
				{"blue-green", []string{`"blue-green" is not an order`, "start-first", "stop-first"}},
				{"150%", []string{"max_surge", "1% to 100%"}},
				{"progress_deadline", []string{"must be at least 1s"}},
			},
		},
		{
			name: "env names and values",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    env:\n      1X: a\n      EMPTY:\n",
			want: []want{
				{"1X", []string{`"1X" is not a variable name`}},
				{"EMPTY", []string{"EMPTY has no value", `EMPTY: ""`}},
			},
		},
		{
			name: "paths that must be absolute",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    working_dir: srv\n    tmpfs: [tmp]\n    volumes: [\"data:rel\", \"~/x:/x\", \":/anon\"]\n",
			want: []want{
				{"working_dir", []string{`"srv" must be an absolute path`}},
				{"tmpfs", []string{`"tmp" must be an absolute path`}},
				{"volumes:", []string{`"data:rel": the path in the container must be absolute`}},
				{"volumes:", []string{`"~" is not expanded`}},
				{"volumes:", []string{"an anonymous volume keeps no data"}},
			},
		},
		{
			name: "a Dockerfile outside its context",
			src:  "project: shop\neggs:\n  web:\n    build: {context: ./web, dockerfile: ../Dockerfile}\n  api:\n    build: {dockerfile: Dockerfile}\n",
			want: []want{
				{"../Dockerfile", []string{`"../Dockerfile" must be a path inside the build context`}},
				{"build: {dockerfile", []string{`egg "api" build needs a context`}},
			},
		},
		{
			name: "a bad stop signal",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    stop_signal: SIGSTOPPLEASE\n",
			want: []want{{"stop_signal", []string{`unknown signal "SIGSTOPPLEASE"`, "SIGTERM"}}},
		},
		{
			name: "secrets need exactly one source",
			src: "project: shop\neggs:\n  web:\n    image: nginx\n    secrets: [a, b]\nsecrets:\n" +
				"  a: {file: ./a.txt, env: A}\n  b: {}\n",
			want: []want{
				{"a: {file", []string{`secret "a" needs exactly one of file:`, "env:"}},
				{"b: {}", []string{`secret "b" needs exactly one of file:`}},
			},
		},
		{
			name: "bad names of volumes, networks and secrets",
			src:  "project: shop\neggs:\n  web: {image: nginx}\nvolumes:\n  Data: {}\nnetworks:\n  back.end: {}\nsecrets:\n  \"api key\": {env: K}\n",
			want: []want{
				{"Data:", []string{`volume name "Data" must be 1 to 40 lower-case letters, digits, hyphens or underscores`}},
				{"back.end", []string{`network name "back.end"`}},
				{"api key", []string{`secret name "api key"`}},
			},
		},
		{
			name: "a key set twice",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    image: httpd\n",
			want: []want{{"image: httpd", []string{`"image" is set twice (first on line 4)`}}},
		},
		{
			name: "an egg that is not a mapping",
			src:  "project: shop\neggs:\n  web: nginx\n",
			want: []want{{"web:", []string{`egg "web" must be a mapping of its settings`, "{image: nginx:1.27}"}}},
		},
		{
			name: "no eggs at all",
			src:  "project: shop\neggs: {}\n",
			want: []want{{"eggs:", []string{"eggs is empty"}}},
		},
		{
			name: "a condition without its key",
			src:  "project: shop\neggs:\n  web: {image: x, depends_on: {db: healthy}}\n  db: {image: y}\n",
			want: []want{{"web:", []string{`depends_on db: write db: {condition: healthy}`}}},
		},
		{
			name: "a list where a mapping belongs",
			src:  "project: shop\neggs:\n  - web\n",
			want: []want{{"- web", []string{"eggs must be a mapping", "not a list"}}},
		},
		{
			name: "a mapping where a list belongs",
			src:  "project: shop\neggs:\n  web:\n    image: nginx\n    tmpfs: {path: /tmp}\n",
			want: []want{{"tmpfs", []string{"tmpfs must be a list, for example [/tmp], not a mapping"}}},
		},
		{
			name: "a YAML syntax error keeps its line",
			src:  "project: shop\neggs:\n  web:\n    image: nginx: 1\n",
			want: []want{{"image:", []string{"not valid YAML: mapping values are not allowed"}}},
		},
		{
			name: "a YAML parser error points at the construct it is in",
			src:  "project: shop\neggs:\n  web:\n    image: [nginx\n    port: 80\n",
			want: []want{{"[nginx", []string{"not valid YAML: did not find expected ',' or ']'"}}},
		},
		{
			name: "an empty file",
			src:  "",
			want: nil, // checked below: one error on line 1
		},
		{
			name: "two documents",
			src:  "project: shop\neggs:\n  web: {image: nginx}\n---\nproject: other\n",
			want: []want{{"---", []string{"one YAML document"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := parse(tt.src)
			var perr *Error
			if !errors.As(err, &perr) {
				t.Fatalf("Parse = %v, %v; want an *Error", p, err)
			}
			if tt.src == "" {
				if len(perr.Errors) != 1 || perr.Errors[0].Line != 1 || !strings.Contains(perr.Errors[0].Message, "empty") {
					t.Fatalf("empty file: %v", perr)
				}
				return
			}
			checkDiagnostics(t, tt.src, perr.Errors, tt.want)
		})
	}
}

func TestParseReportsAllErrorsSortedByLine(t *testing.T) {
	// The problems are found in another order than the lines' (sections are
	// read before eggs, project checks after both), and all are reported.
	src := `project: shop
eggs:
  web:
    image: nginx
    replicas: 2
    volumes: ["pgdata:/data"]
    depends_on: [nope]
  api:
    image: nginx
    stop_timeout: soon
volumes:
  pgdata: {}
secrets:
  key: {}
`
	_, err := parse(src)
	var perr *Error
	if !errors.As(err, &perr) {
		t.Fatalf("Parse = %v, want an *Error", err)
	}
	checkDiagnostics(t, src, perr.Errors, []want{
		{"replicas: 2", []string{"one replica"}},
		{"depends_on", []string{`depends on "nope"`}},
		{"stop_timeout", []string{"not a duration"}},
		{"key: {}", []string{"exactly one of file"}},
	})
	if got := strings.Count(err.Error(), "\n") + 1; got != 4 {
		t.Errorf("Error() has %d lines, want one per error:\n%s", got, err)
	}
	if !strings.HasPrefix(err.Error(), "hatch.yaml:5: ") {
		t.Errorf("Error() does not start with the first line's error: %s", err)
	}
	// With errors, the warnings are still there to print.
	checkDiagnostics(t, src, perr.Warnings, []want{{"key: {}", []string{`secret "key" is not used`}}})
}

func TestParseWarns(t *testing.T) {
	src := `project: shop
eggs:
  web:
    image: nginx
    volumes: ["./static:/usr/share/nginx/html:ro"]
volumes:
  unused: {}
networks:
  lonely: {}
secrets:
  forgotten: {env: TOKEN}
`
	p, err := Parse([]byte(src), "/srv/shop/hatch.yaml", Options{})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if len(p.Warnings) != 4 {
		t.Fatalf("warnings = %v, want 4", p.Warnings)
	}
	for i, w := range []struct {
		at    string
		words string
	}{
		{"./static", "bind mount of /srv/shop/static: it ties egg \"web\" to a host"},
		{"unused", `volume "unused" is not mounted by any egg`},
		{"lonely", `network "lonely" has no egg on it`},
		{"forgotten", `secret "forgotten" is not used by any egg`},
	} {
		d := p.Warnings[i]
		if d.Line != lineOf(t, src, w.at) || !strings.Contains(d.Message, w.words) || d.File != "/srv/shop/hatch.yaml" {
			t.Errorf("warning %d = %s, want line of %q saying %q", i, d, w.at, w.words)
		}
	}
	m := p.Eggs[0].Volumes[0]
	if m.Type != MountBind || m.Source != "/srv/shop/static" || m.Target != "/usr/share/nginx/html" || !m.ReadOnly {
		t.Errorf("bind mount = %+v", m)
	}
}

func TestParseAppliesDefaults(t *testing.T) {
	p, err := parse("project: shop\neggs:\n  web: {image: nginx}\n  db:\n    image: postgres\n    volumes: [\"pgdata:/data\"]\n    health: {}\nvolumes: {pgdata: }\n")
	if err != nil {
		t.Fatal(err)
	}
	web, _ := p.Egg("web")
	if web.Replicas != 1 || web.Restart != RestartAlways || web.StopSignal != "SIGTERM" || web.StopTimeout != 10*time.Second {
		t.Errorf("web defaults = replicas %d, restart %q, stop %s after %s", web.Replicas, web.Restart, web.StopSignal, web.StopTimeout)
	}
	wantRollout := Rollout{Order: StartFirst, MaxSurge: Surge{Percent: 25}, DrainTimeout: 10 * time.Second, ProgressDeadline: 5 * time.Minute}
	if web.Rollout != wantRollout {
		t.Errorf("web rollout = %+v, want %+v", web.Rollout, wantRollout)
	}
	if web.Health != nil || len(web.Networks) != 1 || web.Networks[0] != DefaultNetwork {
		t.Errorf("web health %v, networks %v; want none and [default]", web.Health, web.Networks)
	}
	db, _ := p.Egg("db")
	if db.Rollout.Order != StopFirst || !db.Stateful() {
		t.Errorf("a stateful egg rolls %q, want stop-first", db.Rollout.Order)
	}
	wantHealth := Health{Interval: 5 * time.Second, Timeout: 2 * time.Second, Retries: 3}
	if db.Health == nil || db.Health.Interval != wantHealth.Interval || db.Health.Timeout != wantHealth.Timeout || db.Health.Retries != wantHealth.Retries {
		t.Errorf("an empty health block = %+v, want the default timings %+v", db.Health, wantHealth)
	}
	if len(p.Networks) != 1 || p.Networks[0].Name != DefaultNetwork {
		t.Errorf("networks = %v, want the default one only", p.Networks)
	}
}

func TestParseReadsEveryField(t *testing.T) {
	src := `project: shop
x-limits: &limits {memory: 1Gi, cpus: 1.5, pids: 100}
eggs:
  web:
    build: {context: ./web/, dockerfile: docker/Dockerfile.prod, args: {SHA: "${env.TAG}"}, target: app}
    replicas: 0
    command: ["/app", "--db", "${db.address}"]
    entrypoint: ["/tini", "--"]
    user: "1000:1000"
    working_dir: /srv
    port: 8080
    ports: ["8088:8080", "9000:9000/tcp"]
    env: ["A=1", "B=${db.hosts}"]
    health: {cmd: "curl -f localhost", interval: 1s, timeout: 500ms, start_period: 1m, retries: 5}
    routes: [shop.localhost, "api.localhost/v1/"]
    aliases: [front]
    rollout: {order: stop-first, max_surge: 50%, min_ready: 3s, drain_timeout: 0s, progress_deadline: 1h, auto_revert: true}
    restart: on-failure
    resources: *limits
    tmpfs: [/tmp, /run/]
    read_only: true
    cap_add: [cap_net_admin]
    cap_drop: [ALL]
    labels: {team: shop}
    secrets: [key]
    networks: [back, default]
    depends_on: {db: {condition: healthy}, migrate: {condition: completed}, cache: {}}
    stop_signal: int
    stop_timeout: 1m30s
    placement: {hosts: [host-a, host-b]}
  db: {image: postgres, port: 5432}
  migrate: {image: migrate, restart: "no"}
  cache: {image: redis}
networks: {back: {}}
secrets: {key: {env: KEY}}
`
	p, err := parse(src)
	if err != nil {
		t.Fatal(err)
	}
	web, _ := p.Egg("web")
	portsLine, routesLine, depsLine := lineOf(t, src, "ports:"), lineOf(t, src, "routes:"), lineOf(t, src, "depends_on:")
	checks := []struct {
		name      string
		got, want any
	}{
		{"build", *web.Build, Build{Context: "web", Dockerfile: "docker/Dockerfile.prod", Args: map[string]string{"SHA": "1.2"}, Target: "app"}},
		{"replicas", web.Replicas, 0},
		{"command", web.Command, []string{"/app", "--db", "${egg/db.address}"}},
		{"entrypoint", web.Entrypoint, []string{"/tini", "--"}},
		{"user", web.User, "1000:1000"},
		{"working_dir", web.WorkingDir, "/srv"},
		{"port", web.Port, 8080},
		{"ports", web.Ports, []PortMapping{{8088, 8080, "tcp", portsLine}, {9000, 9000, "tcp", portsLine}}},
		{"env", web.Env, map[string]string{"A": "1", "B": "${egg/db.hosts}"}},
		{"health", *web.Health, Health{Cmd: []string{"CMD-SHELL", "curl -f localhost"}, Interval: time.Second, Timeout: 500 * time.Millisecond, StartPeriod: time.Minute, Retries: 5}},
		{"routes", web.Routes, []Route{{Host: "shop.localhost", Path: "/", Line: routesLine}, {Host: "api.localhost", Path: "/v1", Line: routesLine}}},
		{"aliases", web.Aliases, []string{"front"}},
		{"rollout", web.Rollout, Rollout{Order: StopFirst, MaxSurge: Surge{Percent: 50}, MinReady: 3 * time.Second, ProgressDeadline: time.Hour, AutoRevert: true}},
		{"restart", web.Restart, RestartOnFailure},
		{"resources", web.Resources, Resources{Memory: 1 << 30, CPUs: 1.5, Pids: 100}},
		{"tmpfs", web.Tmpfs, []string{"/tmp", "/run"}},
		{"read_only", web.ReadOnly, true},
		{"cap_add", web.CapAdd, []string{"NET_ADMIN"}},
		{"cap_drop", web.CapDrop, []string{"ALL"}},
		{"labels", web.Labels, map[string]string{"team": "shop"}},
		{"secrets", web.Secrets, []string{"key"}},
		{"networks", web.Networks, []string{"back", "default"}},
		{"depends_on", web.DependsOn, []DependsOn{
			{"db", resource.ConditionHealthy, depsLine}, {"migrate", resource.ConditionCompleted, depsLine}, {"cache", resource.ConditionCreated, depsLine},
		}},
		{"stop_signal", web.StopSignal, "SIGINT"},
		{"stop_timeout", web.StopTimeout, 90 * time.Second},
		{"placement", web.Placement.Hosts, []string{"host-a", "host-b"}},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %#v, want %#v", c.name, c.got, c.want)
		}
	}
}

func TestSizes(t *testing.T) {
	for in, want := range map[string]int64{
		"1048576": 1 << 20, "256Mi": 256 << 20, "256m": 256 << 20, "256MB": 256 << 20,
		"1Gi": 1 << 30, "1.5g": 3 << 29, "512k": 512 << 10, "2Ti": 2 << 40, "100b": 100,
	} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "Mi", "256Mo", "-1Mi", "1e3", "256 Mi B"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestSuggest(t *testing.T) {
	valid := []string{"replicas", "restart", "routes", "env", "image"}
	for word, want := range map[string]string{
		"replica":    `: did you mean "replicas"?`,
		"restrat":    `: did you mean "restart"?`,
		"imag":       `: did you mean "image"?`,
		"memory":     "",
		"x":          "",
		"enviroment": "",
	} {
		if got := suggest(word, valid); got != want {
			t.Errorf("suggest(%q) = %q, want %q", word, got, want)
		}
	}
}

// Merge keys may name one anchor many times over: each mapping is flattened
// once, so this file (2^40 merges if expanded naively) loads at once.
func TestMergeKeysAreNotExpandedExponentially(t *testing.T) {
	var b strings.Builder
	b.WriteString("project: shop\nx-0: &a0 {team: shop}\n")
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&b, "x-%d: &a%d {<<: [*a%d, *a%d]}\n", i, i, i-1, i-1)
	}
	b.WriteString("eggs:\n  web:\n    image: nginx\n    labels:\n      <<: *a40\n      tier: front\n")
	p, err := parse(b.String())
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Eggs[0].Labels; !reflect.DeepEqual(got, map[string]string{"team": "shop", "tier": "front"}) {
		t.Fatalf("labels = %v", got)
	}
}

// A mapping's own keys override merged ones, and the first merged source
// wins over the next, as YAML's merge keys say.
func TestMergeKeyPrecedence(t *testing.T) {
	p, err := parse(`project: shop
x-a: &a {image: a, port: 1, replicas: 2}
x-b: &b {image: b, port: 2, user: b}
eggs:
  web:
    <<: [*a, *b]
    port: 3
`)
	if err != nil {
		t.Fatal(err)
	}
	web := p.Eggs[0]
	if web.Image != "a" || web.Port != 3 || web.Replicas != 2 || web.User != "b" {
		t.Fatalf("merged egg = image %q, port %d, replicas %d, user %q", web.Image, web.Port, web.Replicas, web.User)
	}
}
