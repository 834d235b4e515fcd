package compose

import (
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/spec"
)

func TestXHatchRoutesTakeTLSAndHSTS(t *testing.T) {
	p := load(t, "services:\n  web:\n    image: nginx\n    ports: [\"80\"]\n    x-hatch:\n      routes: [web.localhost, {host: shop.example.com, tls: auto, hsts: true}, {host: plain.example.com/api, tls: \"off\"}]\n", Options{})
	routes := p.Project.Eggs[0].Routes
	if len(routes) != 3 {
		t.Fatalf("routes %+v", routes)
	}
	got := map[string]spec.Route{}
	for _, r := range routes {
		got[r.Name()] = r
	}
	if r := got["shop.example.com"]; r.TLS != spec.TLSAuto || !r.HSTS {
		t.Errorf("shop.example.com: %+v", r)
	}
	if r := got["plain.example.com/api"]; r.TLS != spec.TLSOff || r.HSTS {
		t.Errorf("plain.example.com/api: %+v", r)
	}
	out, err := spec.Marshal(p.Project)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "{host: shop.example.com, tls: auto, hsts: true}") {
		t.Errorf("hatch convert does not write the route's TLS:\n%s", out)
	}
}
