package provider

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/desired"
)

// selfSigned returns a PEM certificate for host and its key.
func selfSigned(t *testing.T, host string, serial int64) (string, string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(k)
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
}

const ownCertYAML = `project: a
secrets:
  crt: {env: CRT}
  key: {env: KEY}
eggs:
  web:
    image: w:1
    port: 80
    placement: {hosts: [h1]}
    routes: [{host: own.example.com, tls: {cert: "${secret.crt}", key: "${secret.key}"}, hsts: true}]
`

func TestAUserCertificateReachesEveryHostAndRotatesWithoutARoll(t *testing.T) {
	e := newEnv(t, "h1", "h2")
	crt, key := selfSigned(t, "own.example.com", 1)
	e.apply("default/a", ownCertYAML, map[string]string{"crt": crt, "key": key})
	w, _ := e.state("h1").Workload("default/a/web")
	if len(w.Routes) != 1 || w.Routes[0].TLS != contract.TLSSecret || !w.Routes[0].HSTS {
		t.Fatalf("route %+v, want TLS from secrets with HSTS", w.Routes)
	}
	hash := contract.SpecHash(w)
	for _, h := range []string{"h1", "h2"} {
		c, ok := e.state(h).Certificate("own.example.com")
		if !ok || c.Chain != crt || string(c.Key) != key || c.Source != desired.SourceSecret {
			t.Fatalf("certificate on %s: %v (source %q), want the user's", h, ok, c.Source)
		}
	}

	crt2, key2 := selfSigned(t, "own.example.com", 2)
	e.apply("default/a", ownCertYAML, map[string]string{"crt": crt2, "key": key2})
	for _, h := range []string{"h1", "h2"} {
		if c, _ := e.state(h).Certificate("own.example.com"); c.Chain != crt2 || string(c.Key) != key2 {
			t.Fatalf("after rotation the certificate on %s is not the new one", h)
		}
	}
	if w, _ := e.state("h1").Workload("default/a/web"); contract.SpecHash(w) != hash {
		t.Fatal("a new certificate changed the spec hash: it would roll the containers")
	}

	// Another project may not serve the name, with whatever settings.
	other := "project: b\neggs:\n  x: {image: x:1, port: 80, routes: [{host: own.example.com/x, tls: auto}]}\n"
	_, err := e.reconciler(Options{}).Reconcile(t.Context(), "default/b", e.project("default/b", other, nil))
	var conflict *desired.ConflictError
	if !errors.As(err, &conflict) || conflict.Holder != "default/a/web" || !strings.Contains(err.Error(), "TLS settings of own.example.com") {
		t.Fatalf("b's route on a's hostname: %v, want a TLS conflict naming default/a/web", err)
	}
	e.destroy("default/b", Options{})

	e.destroy("default/a", Options{})
	for _, h := range []string{"h1", "h2"} {
		if len(e.state(h).Certificates) != 0 {
			t.Fatalf("certificates left on %s after destroy", h)
		}
	}
}

func TestABadUserCertificateIsRefusedWithoutItsKey(t *testing.T) {
	e := newEnv(t, "h1")
	crt, _ := selfSigned(t, "other.example.com", 1)
	_, key := selfSigned(t, "own.example.com", 2)
	_, err := e.reconciler(Options{}).Reconcile(t.Context(), "default/a",
		e.project("default/a", ownCertYAML, map[string]string{"crt": crt, "key": key}))
	if err == nil || !strings.Contains(err.Error(), "own.example.com") {
		t.Fatalf("a mismatched pair: %v, want an error naming the route", err)
	}
	if strings.Contains(err.Error(), key[40:80]) {
		t.Fatal("the error carries the key")
	}
}

func TestTLSDefaultsToAutoForPublicNamesOnlyWithAnACMECA(t *testing.T) {
	yaml := "project: a\neggs:\n  web: {image: w:1, port: 80, routes: [shop.example.com, shop.localhost, {host: plain.example.com, tls: \"off\"}]}\n"
	for _, acme := range []bool{false, true} {
		e := newEnv(t, "h1")
		e.setWith(func(d *desired.Deps) { d.ACME = acme })
		e.apply("default/a", yaml, nil)
		w, _ := e.state("h1").Workload("default/a/web")
		got := map[string]string{}
		for _, r := range w.Routes {
			got[r.Host] = r.TLS
		}
		want := map[string]string{"shop.example.com": contract.TLSOff, "shop.localhost": contract.TLSOff, "plain.example.com": contract.TLSOff}
		if acme {
			want["shop.example.com"] = contract.TLSAuto
		}
		for h, m := range want {
			if got[h] != m {
				t.Errorf("acme %v: route %s TLS %q, want %q", acme, h, got[h], m)
			}
		}
	}
}

func TestThePlanWarnsWhenAnACMERouteLandsOnHostsOffTheStandardPorts(t *testing.T) {
	e := newEnv(t, "h1", "h2")
	e.setWith(func(d *desired.Deps) { d.ACME = true })
	for host, ports := range map[string][2]int{"h1": {80, 443}, "h2": {8080, 0}} {
		rep, _ := json.Marshal(contract.StatusReport{HostID: host, Time: e.clock.Now(), HTTPPort: ports[0], HTTPSPort: ports[1]})
		if _, err := e.st.PutStatus(t.Context(), host, rep, e.clock.Now()); err != nil {
			t.Fatal(err)
		}
	}
	steps, err := e.preview("default/a", "project: a\neggs:\n  web: {image: w:1, port: 80, routes: [shop.example.com, shop.localhost]}\n", Options{})
	if err != nil {
		t.Fatal(err)
	}
	var warnings []string
	for _, hs := range steps {
		for _, s := range hs.Steps {
			if strings.HasPrefix(s, "warning:") {
				warnings = append(warnings, hs.Name+": "+s)
			}
		}
	}
	if len(warnings) != 1 || !strings.HasPrefix(warnings[0], "h2: ") || !strings.Contains(warnings[0], "listens on :8080 and none") ||
		!strings.Contains(warnings[0], "shop.example.com") {
		t.Fatalf("warnings %q, want one for h2 on shop.example.com", warnings)
	}
}
