package ingress

import (
	"strings"
	"testing"
	"time"
)

func TestParseRoute(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Route
		wantErr string
	}{
		{in: "shop.localhost", want: Route{Host: "shop.localhost"}},
		{in: "API.localhost/v1", want: Route{Host: "api.localhost", PathPrefix: "/v1"}},
		{in: "api.localhost/v1/", want: Route{Host: "api.localhost", PathPrefix: "/v1"}},
		{in: "api.localhost/", want: Route{Host: "api.localhost"}},
		{in: "shop.localhost./a/b", want: Route{Host: "shop.localhost", PathPrefix: "/a/b"}},
		{in: "", wantErr: "no hostname"},
		{in: "/v1", wantErr: "no hostname"},
		{in: "shop.localhost:8080", wantErr: "may not hold a port"},
		{in: "shop.localhost/v1?x=1", wantErr: "may not hold a query"},
	} {
		got, err := ParseRoute(tc.in)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseRoute(%q) = %v, %v; want error %q", tc.in, got, err, tc.wantErr)
			}
		case err != nil || got != tc.want:
			t.Errorf("ParseRoute(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestUpdateRejectsAnInvalidTableAndKeepsTheOldOne(t *testing.T) {
	good := Egg{Name: "web", Routes: []Route{{Host: "web.localhost"}}, Ports: []Port{{Published: 9000}},
		Backends: []Backend{{ContainerID: "c1", Addr: "127.0.0.1:1234", Healthy: true}}}
	for _, tc := range []struct {
		name    string
		eggs    []Egg
		wantErr string
	}{
		{"egg without a name", []Egg{{}}, "egg #0 has no name"},
		{"egg listed twice", []Egg{good, {Name: "web"}}, `egg "web": listed twice`},
		{"route held by two eggs", []Egg{good, {Name: "api", Routes: []Route{{Host: "Web.localhost"}}}},
			`egg "api": route "web.localhost" is already held by egg "web"`},
		{"route without a host", []Egg{{Name: "web", Routes: []Route{{PathPrefix: "/v1"}}}}, "no hostname"},
		{"port held by two eggs", []Egg{good, {Name: "api", Ports: []Port{{Published: 9000}}}},
			`published port 9000 is already held by egg "web"`},
		{"port out of range", []Egg{{Name: "web", Ports: []Port{{Published: 70000}}}}, "out of range"},
		{"container in two eggs", []Egg{good, {Name: "api", Backends: []Backend{{ContainerID: "c1", Addr: "127.0.0.1:1"}}}},
			`container c1 is already a backend of egg "web"`},
		{"address without a port", []Egg{{Name: "web", Backends: []Backend{{ContainerID: "c2", Addr: "127.0.0.1"}}}},
			`address "127.0.0.1" is not ip:port`},
		{"address is a name", []Egg{{Name: "web", Backends: []Backend{{ContainerID: "c2", Addr: "web:80"}}}}, "is not ip:port"},
		{"backend without a container", []Egg{{Name: "web", Backends: []Backend{{Addr: "127.0.0.1:80"}}}}, "has no container ID"},
		{"negative drain timeout", []Egg{{Name: "web", DrainTimeout: -time.Second}}, "negative drain timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := startIngress(t, nil)
			be := newTestBackend(t, "kept")
			kept := Table{Eggs: []Egg{{Name: "kept", Routes: []Route{{Host: "kept.localhost"}},
				Backends: []Backend{{ContainerID: "k", Addr: be.addr(), Healthy: true}}}}}
			mustUpdate(t, in, kept)
			err := in.Update(Table{Eggs: tc.eggs})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Update = %v, want an error containing %q", err, tc.wantErr)
			}
			c, _ := newClient(t)
			if code, from, _ := get(t, c, in, "kept.localhost", "/"); code != 200 || from != "kept" {
				t.Fatalf("the previous table is not in force any more: %d from %q", code, from)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	if err := testConfig(t).Validate(); err != nil {
		t.Fatalf("DefaultConfig with its dependencies: %v", err)
	}
	for _, tc := range []struct {
		name    string
		tweak   func(*Config)
		wantErr string
	}{
		{"HTTP address without port", func(c *Config) { c.HTTPAddr = "localhost" }, "HTTPAddr"},
		{"admin address without port", func(c *Config) { c.AdminAddr = "x" }, "AdminAddr"},
		{"publish address is a name", func(c *Config) { c.PublishAddr = "localhost" }, "PublishAddr"},
		{"zero dial timeout", func(c *Config) { c.DialTimeout = 0 }, "DialTimeout"},
		{"zero drain timeout", func(c *Config) { c.DrainTimeout = 0 }, "DrainTimeout"},
		{"zero eject period", func(c *Config) { c.EjectFor = 0 }, "EjectFor"},
		{"no logger", func(c *Config) { c.Logger = nil }, "no logger"},
		{"no metrics registry", func(c *Config) { c.Registry = nil }, "no metrics registry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			tc.tweak(&cfg)
			if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("New = %v, want an error naming %s", err, tc.wantErr)
			}
		})
	}
}
