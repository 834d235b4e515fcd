package provider

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/desired"
)

// reportChallenges makes a host report the challenge tokens it has loaded.
func (e *env) reportChallenges(host string, tokens ...string) {
	e.t.Helper()
	rep, _ := json.Marshal(contract.StatusReport{HostID: host, Time: e.clock.Now(), Challenges: tokens})
	if _, err := e.st.PutStatus(e.t.Context(), host, rep, e.clock.Now()); err != nil {
		e.t.Fatal(err)
	}
}

// A certificate needs a host to go to: with none, PutCertificate says so
// rather than dropping it.
func TestAnACMECertificateWithNoHostIsRefused(t *testing.T) {
	e := newEnv(t)
	err := e.set.PutCertificate(t.Context(), contract.Certificate{Host: "shop.example.com", Chain: "c", Key: "k"})
	if !errors.Is(err, desired.ErrNoHosts) {
		t.Fatalf("put with no host: %v, want ErrNoHosts", err)
	}
}

// What the ACME manager sees of the fleet with one host live and one down:
// the auto names, the challenge on every host, only the live host waited
// for until it reports the token, the certificate on every host.
func TestTheACMEManagersViewWithOneHostLiveAndOneDown(t *testing.T) {
	e := newEnv(t, "h1", "h2")
	e.setWith(func(d *desired.Deps) { d.ACME = true })
	e.apply("default/a", "project: a\neggs:\n  web: {image: w:1, port: 80, routes: [shop.example.com, plain.localhost]}\n", nil)
	e.down("h2")
	ctx := t.Context()

	names, err := e.set.TLSNames(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := names["shop.example.com"]; len(names) != 1 || !ok || c != nil {
		t.Fatalf("TLS names %v, want shop.example.com with no certificate yet", names)
	}

	ch := contract.Challenge{Token: "tok", KeyAuth: "tok.key"}
	if err := e.set.SetChallenge(ctx, ch, true); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"h1", "h2"} {
		if got := e.state(h).Challenges; len(got) != 1 || got[0] != ch {
			t.Fatalf("challenges on %s: %+v, want the one set", h, got)
		}
	}
	waiting, err := e.set.ChallengeWaiting(ctx, "tok")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(waiting, []string{"h1"}) {
		t.Fatalf("waiting %v, want the live host h1 only (h2 is down)", waiting)
	}
	e.reportChallenges("h1", "other")
	if waiting, _ := e.set.ChallengeWaiting(ctx, "tok"); !slices.Equal(waiting, []string{"h1"}) {
		t.Fatalf("waiting %v after h1 reported another token, want h1", waiting)
	}
	e.reportChallenges("h1", "tok")
	if waiting, err := e.set.ChallengeWaiting(ctx, "tok"); err != nil || len(waiting) != 0 {
		t.Fatalf("waiting %v, %v after h1 loaded the token, want none", waiting, err)
	}

	if err := e.set.PutCertificate(ctx, contract.Certificate{Host: "shop.example.com", Chain: "chain", Key: "key"}); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"h1", "h2"} {
		if c, ok := e.state(h).Certificate("shop.example.com"); !ok || c.Chain != "chain" || c.Source != desired.SourceACME {
			t.Fatalf("certificate on %s: %+v, %v, want the ACME one", h, c, ok)
		}
	}
	names, _ = e.set.TLSNames(ctx)
	if c := names["shop.example.com"]; c == nil || c.Chain != "chain" {
		t.Fatalf("TLS names %v, want shop.example.com with its certificate", names)
	}

	if err := e.set.SetChallenge(ctx, contract.Challenge{Token: "tok"}, false); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"h1", "h2"} {
		if got := e.state(h).Challenges; len(got) != 0 {
			t.Fatalf("challenges on %s after withdrawal: %+v", h, got)
		}
	}
}
