package compose

import (
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/hatchery/hatchery/internal/resource"
)

func TestNameMapping(t *testing.T) {
	for _, tc := range []struct{ service, egg string }{
		{"web", "web"}, {"api_gateway", "api-gateway"}, {"Auth.Service", "auth-service"},
		{"_private", "private"}, {"WEB-1", "web-1"}, {"a.b_c.D", "a-b-c-d"},
	} {
		if got := eggName(tc.service); got != tc.egg {
			t.Errorf("eggName(%q) = %q, want %q", tc.service, got, tc.egg)
		}
	}
	for _, tc := range []struct{ name, key string }{
		{"pgdata", "pgdata"}, {"db_data", "db_data"}, {"User.Data", "user-data"}, {"API_KEY", "api_key"},
	} {
		if got := keyName(tc.name); got != tc.key {
			t.Errorf("keyName(%q) = %q, want %q", tc.name, got, tc.key)
		}
	}
	if got := projectName("my_app"); got != "my-app" {
		t.Errorf("projectName(my_app) = %q", got)
	}
}

func TestMapNamesReportsWhatCannotBeMapped(t *testing.T) {
	long := strings.Repeat("x", 41)
	m, problems := serviceNames.mapNames([]string{"web", "my_db", "my-db", "env", long, "ok"})
	want := []string{ // in name order
		`service "env": the name "env" is reserved`,
		`services "my-db" and "my_db" both become "my-db" in Hatchery: rename one of them`,
		`service "` + long + `" becomes "` + long + `", but Hatchery names are 1 to 40 lower-case letters, digits or hyphens`,
	}
	if len(problems) != len(want) {
		t.Fatalf("problems %q, want %d", problems, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(problems[i], w) {
			t.Errorf("problem %d = %q, want %q", i, problems[i], w)
		}
	}
	if m.to["web"] != "web" || m.to["my-db"] != "my-db" || m.to["ok"] != "ok" || m.from["my-db"] != "my-db" {
		t.Errorf("mapped %v", m.to)
	}
	if _, ok := m.to["my_db"]; ok {
		t.Error("a colliding name was mapped")
	}
}

func testEncoder() encoder {
	services, _ := serviceNames.mapNames([]string{"web", "my_db"})
	volumes, _ := keyNames("volume").mapNames([]string{"data"})
	networks, _ := keyNames("network").mapNames([]string{"back"})
	secrets, _ := keyNames("secret").mapNames([]string{"API_KEY"})
	return encoder{services: services, volumes: volumes, networks: networks, secrets: secrets}
}

func TestWithRefs(t *testing.T) {
	en := testEncoder()
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "plain", want: "plain"},
		{in: "postgres://${my_db.address}/app", want: "postgres://${egg/my-db.address}/app"},
		{in: "${my-db.hosts}", want: "${egg/my-db.hosts}"},
		{in: "${secret.API_KEY}", want: "${secret/api_key.handle}"},
		{in: "${secret.api_key}", want: "${secret/api_key.handle}"},
		{in: "${volume.data.host}", want: "${volume/data.host}"},
		{in: "${network.back.name}", want: "${network/back.name}"},
		{in: "echo ${HOME} costs $5", want: "echo $${HOME} costs $5"},
		{in: "${java.home}/conf", want: "$${java.home}/conf"},
		{in: "${unclosed", want: "$${unclosed"},
		{in: "$${x}", want: "$$${x}"},
		{in: "${my_db.adress}", err: "a service's outputs are address (host:port) and hosts"},
		{in: "${secret.nope}", err: `no secret "nope"`},
		{in: "${secret.API_KEY.value}", err: "a secret has one value"},
		{in: "${volume.data}", err: "write $${volume.data.name}"},
		{in: "${network.front.name}", err: `no network "front"`},
		{in: "${env.HOME}", err: "Compose substitutes variables itself: write ${HOME}"},
		{in: "$${my_db.address}", err: `a literal "$" right before`},
	} {
		got, err := en.withRefs(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("withRefs(%q) = %q, %v; want an error saying %q", tc.in, got, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("withRefs(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// Whatever text the Compose file hands the container, its encoding reads
// back as that text wherever it holds no reference, and holds exactly the
// references written.
func TestWithRefsProperty(t *testing.T) {
	en := testEncoder()
	rapid.Check(t, func(t *rapid.T) {
		var in strings.Builder
		var refs []resource.Ref
		for range rapid.IntRange(0, 8).Draw(t, "parts") {
			part := rapid.SampledFrom([]string{"$", "{", "}", "a", ".", "${", "${HOME}", "${x.y}", "$${", "${web.address}", "${secret.API_KEY}"}).Draw(t, "part")
			text := in.String()
			if strings.HasSuffix(text, "$") && (part == "${web.address}" || part == "${secret.API_KEY}") {
				continue // cannot be expressed, checked in TestWithRefs
			}
			in.WriteString(part)
		}
		s := in.String()
		encoded, err := en.withRefs(s)
		if err != nil {
			t.Fatalf("withRefs(%q): %v", s, err)
		}
		for _, r := range []struct {
			text string
			ref  resource.Ref
		}{{"${web.address}", resource.Ref{Key: "egg/web", Output: "address"}}, {"${secret.API_KEY}", resource.Ref{Key: "secret/api_key", Output: "handle"}}} {
			for range strings.Count(s, r.text) {
				refs = append(refs, r.ref)
			}
		}
		// Resolving each reference to the text it was written as gives the
		// input back.
		var found []resource.Ref
		back, err := resource.Resolve(map[string]any{"v": encoded}, func(r resource.Ref) (any, error) {
			found = append(found, r)
			if r.Key == "egg/web" {
				return "${web.address}", nil
			}
			return "${secret.API_KEY}", nil
		})
		if err != nil {
			t.Fatalf("%q encodes as %q, which does not resolve: %v", s, encoded, err)
		}
		if len(found) != len(refs) {
			t.Fatalf("%q encodes as %q, with references %v, want %d", s, encoded, found, len(refs))
		}
		if got := back["v"]; got != s {
			t.Fatalf("%q encodes as %q, which reads back as %q", s, encoded, got)
		}
	})
}

func TestLocator(t *testing.T) {
	l := newLocator([]string{"a.yaml", "b.yaml", "c.yaml"}, [][]byte{
		[]byte("services:\n  web:\n    image: x\n    deploy:\n      replicas: 2\n"),
		[]byte("services:\n  web:\n    deploy:\n      update_config:\n        order: stop-first\n"),
		[]byte("not: [valid"),
	})
	for _, tc := range []struct {
		path []string
		file string
		line int
	}{
		{[]string{"services", "web", "image"}, "a.yaml", 3},
		{[]string{"services", "web", "deploy", "replicas"}, "a.yaml", 5},
		{[]string{"services", "web", "deploy", "update_config", "order"}, "b.yaml", 5},
		{[]string{"services", "web", "ports", "[]", "target"}, "a.yaml", 2},
		{[]string{"volumes", "data"}, "a.yaml", 1},
	} {
		file, line := l.find(tc.path...)
		if file != tc.file || line != tc.line {
			t.Errorf("find(%v) = %s:%d, want %s:%d", tc.path, file, line, tc.file, tc.line)
		}
	}
}

func TestHostnameConstraint(t *testing.T) {
	for _, tc := range []struct {
		in   string
		host string
		ok   bool
	}{
		{"node.hostname == edge-1", "edge-1", true},
		{"node.hostname==edge-2", "edge-2", true},
		{"node.hostname != edge-1", "", false},
		{"node.role == manager", "", false},
		{"node.hostname ==", "", false},
	} {
		host, ok := hostnameConstraint(tc.in)
		if host != tc.host || ok != tc.ok {
			t.Errorf("hostnameConstraint(%q) = %q, %v", tc.in, host, ok)
		}
	}
}

func TestCPUs(t *testing.T) {
	for _, tc := range []struct {
		in   float32
		want float64
	}{{0.1, 0.1}, {0.25, 0.25}, {1.5, 1.5}, {2, 2}, {0.333, 0.333}} {
		if got := cpus(tc.in); got != tc.want {
			t.Errorf("cpus(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
