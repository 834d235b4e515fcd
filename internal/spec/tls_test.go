package spec

import (
	"errors"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

const tlsProject = `project: shop
secrets:
  crt: {file: ./shop.crt}
  key: {file: ./shop.key}
eggs:
  web:
    image: nginx
    port: 80
    routes:
      - {host: shop.example.com, tls: auto, hsts: true}
      - {host: shop.example.com/api, tls: auto, hsts: true}
      - {host: own.example.com, tls: {cert: "${secret.crt}", key: "${secret.key}"}}
      - {host: plain.example.com, tls: off}
      - web.localhost
`

func TestRouteTLSFormsMapToInputs(t *testing.T) {
	p, err := parse(tlsProject)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Warnings) != 0 {
		t.Errorf("warnings %v: the secrets are used by the route", p.Warnings)
	}
	rs, _ := p.Resources()
	got := map[string]inputs.Route{}
	for _, r := range rs {
		if r.Type != resource.Route {
			continue
		}
		in, err := inputs.Decode[inputs.Route](r.Inputs)
		if err != nil {
			t.Fatal(err)
		}
		got[r.Name] = in
	}
	for name, want := range map[string]inputs.Route{
		"shop.example.com":     {TLS: "auto", HSTS: true},
		"shop.example.com/api": {TLS: "auto", HSTS: true},
		"own.example.com":      {TLS: "secret", Cert: "${secret/crt.handle}", Key: "${secret/key.handle}"},
		"plain.example.com":    {TLS: "off"},
		"web.localhost":        {},
	} {
		g := got[name]
		if g.TLS != want.TLS || g.HSTS != want.HSTS || g.Cert != want.Cert || g.Key != want.Key {
			t.Errorf("route %s: tls %q hsts %v cert %q key %q, want %+v", name, g.TLS, g.HSTS, g.Cert, g.Key, want)
		}
	}
	// The written file says the same.
	out, _ := roundTrip(t, p)
	for _, s := range []string{"tls: auto", "hsts: true", "cert: \"${secret.crt}\"", `tls: "off"`} {
		if !strings.Contains(string(out), s) {
			t.Errorf("written file lacks %q:\n%s", s, out)
		}
	}
}

func TestRouteTLSErrors(t *testing.T) {
	src := `project: shop
secrets:
  crt: {file: ./shop.crt}
eggs:
  web:
    image: nginx
    port: 80
    routes:
      - {host: shop.localhost, tls: auto}
      - {host: a.example.com, tls: off, hsts: true}
      - {host: b.example.com, tls: sometimes}
      - {host: c.example.com, tls: {cert: "${secret.crt}"}}
      - {host: d.example.com, tls: {cert: "${secret.crt}", key: "${secret.nokey}"}}
      - {host: e.example.com, tls: {cert: "${env.X}", key: "${secret.crt}"}}
      - {host: f.example.com, tls: auto}
      - {host: f.example.com/api, tls: off}
`
	_, err := parse(src)
	var perr *Error
	if !errors.As(err, &perr) {
		t.Fatalf("err = %v, want a *Error", err)
	}
	checkDiagnostics(t, src, perr.Errors, []want{
		{"shop.localhost, tls: auto", []string{"tls: auto needs a public DNS name", "shop.localhost", "tls: off"}},
		{"a.example.com", []string{"hsts needs TLS"}},
		{"b.example.com", []string{`unknown value "sometimes"`, "tls: auto"}},
		{"c.example.com", []string{"needs both cert and key"}},
		{"d.example.com", []string{`secret "nokey", which is not defined`}},
		{"e.example.com", []string{"is not a reference to a secret"}},
		{"f.example.com/api", []string{"other TLS settings", "f.example.com", "line"}},
	})
}

func TestRouteTLSErrorsGiveAnExampleThatLoads(t *testing.T) {
	// The certificate form an error shows is copied as it is: written into
	// a route, with the secrets it names, it must load (an unquoted
	// ${secret.crt} inside {...} is not YAML).
	src := "project: shop\neggs:\n  web:\n    image: nginx\n    port: 80\n    routes:\n" +
		"      - {host: shop.localhost, tls: auto}\n      - {host: b.example.com, tls: sometimes}\n      - {host: c.example.com, tls: {cert: \"${secret.crt}\"}}\n" +
		"secrets:\n  crt: {file: ./shop.crt}\n"
	_, err := parse(src)
	var perr *Error
	if !errors.As(err, &perr) || len(perr.Errors) != 3 {
		t.Fatalf("err = %v, want three errors", err)
	}
	for _, d := range perr.Errors {
		i := strings.LastIndex(d.Message, "tls: {")
		if i < 0 {
			t.Errorf("%s: shows no certificate form", d)
			continue
		}
		example := d.Message[i:]
		file := "project: shop\neggs:\n  web:\n    image: nginx\n    port: 80\n    routes:\n" +
			"      - {host: own.example.com, " + example + "}\n" +
			"secrets:\n  crt: {file: ./own.crt}\n  key: {file: ./own.key}\n"
		if _, err := parse(file); err != nil {
			t.Errorf("the form %q of %s does not load:\n%v", example, d, err)
		}
	}
}

func TestPublicName(t *testing.T) {
	for host, want := range map[string]bool{
		"shop.example.com": true, "example.com.": true,
		"localhost": false, "shop.localhost": false, "intranet": false, "10.0.0.1": false, "::1": false,
	} {
		if got := PublicName(host); got != want {
			t.Errorf("PublicName(%q) = %v, want %v", host, got, want)
		}
	}
}
