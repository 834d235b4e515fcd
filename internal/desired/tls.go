package desired

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cenkalti/backoff/v4"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/placement"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/store"
)

// Certificate sources, in contract.Certificate.Source.
const (
	SourceACME   = "acme"
	SourceSecret = "secret"
)

// tlsMode is the route's TLS mode in the contract: the user's choice, or
// for a route that makes none, auto for a public DNS name when the server
// has an ACME CA. A route asking for auto on a server without one is
// served over plain HTTP (the plan says so).
func tlsMode(in inputs.Route, acme bool) string {
	switch in.TLS {
	case "secret":
		return contract.TLSSecret
	case "auto", "":
		if acme && (in.TLS == "auto" || contract.PublicName(in.Host)) {
			return contract.TLSAuto
		}
	}
	return contract.TLSOff
}

// tlsNote is how the plan describes a route's TLS.
func tlsNote(in inputs.Route, r contract.Route) string {
	switch {
	case r.TLS == contract.TLSAuto:
		return " (HTTPS, certificate from the ACME CA)"
	case r.TLS == contract.TLSSecret:
		return " (HTTPS, certificate from secrets)"
	case in.TLS == "auto" || (in.TLS == "" && contract.PublicName(in.Host)):
		return " (plain HTTP: the server has no ACME CA, see hatch server --acme-ca)"
	}
	return ""
}

// checkTLS refuses a route whose hostname another project serves with other
// TLS settings, or at all when this one brings its own certificate: a
// hostname has one certificate and one redirect rule on the whole cluster.
func (v *view) checkTLS(project string, r contract.Route) error {
	holder, ok := v.holder(project, func(w contract.WorkloadSpec) bool {
		return slices.ContainsFunc(w.Routes, func(o contract.Route) bool {
			return o.Host == r.Host && (o.TLS != r.TLS || o.HSTS != r.HSTS || r.TLS == contract.TLSSecret)
		})
	})
	if ok {
		return backoff.Permanent(&ConflictError{Claim: "the TLS settings of " + r.Host, Holder: holder})
	}
	return nil
}

// userCertificate reads a route's certificate and key from the secrets its
// inputs reference (resolved to handles), and checks that they make a pair
// valid for the route's host. Errors name the secrets, never their values.
func (s *States) userCertificate(ctx context.Context, project string, in inputs.Route) (contract.Certificate, error) {
	values, err := s.secretValues(ctx, project, []contract.SecretFile{{Name: "cert", Handle: in.Cert}, {Name: "key", Handle: in.Key}})
	if err != nil {
		return contract.Certificate{}, fmt.Errorf("route %s%s: %w", in.Host, in.Path, err)
	}
	chain, key := values[in.Cert], values[in.Key]
	pair, err := tls.X509KeyPair([]byte(chain), []byte(key))
	if err != nil {
		return contract.Certificate{}, backoff.Permanent(fmt.Errorf("route %s%s: its cert and key secrets are not a PEM certificate chain and its private key: %s",
			in.Host, in.Path, err.Error()))
	}
	if err := pair.Leaf.VerifyHostname(in.Host); err != nil {
		return contract.Certificate{}, backoff.Permanent(fmt.Errorf("route %s%s: the certificate from secrets: %s", in.Host, in.Path, err.Error()))
	}
	return contract.Certificate{Host: in.Host, Chain: string(chain), Key: key, Source: SourceSecret}, nil
}

// setCertificate makes c the certificate of its host on every host.
func (v *view) setCertificate(c contract.Certificate) {
	for _, d := range v.states {
		d.Certificates = slices.DeleteFunc(slices.Clone(d.Certificates), func(o contract.Certificate) bool { return o.Host == c.Host })
		d.Certificates = append(d.Certificates, c)
	}
}

// deriveTLS hands every host the certificates of the hostnames whose routes
// it serves over HTTPS (every host serves every route), and only those: a
// certificate whose hostname no longer has a route of its source's mode is
// dropped; a host that joined gets the others' copy. Challenges are every
// host's too (the CA may ask any of them).
func (v *view) deriveTLS() {
	modes := map[string]string{} // hostname -> its routes' TLS mode
	for _, d := range v.states {
		for _, w := range d.Workloads {
			for _, r := range w.Routes {
				if r.TLS != contract.TLSOff {
					modes[r.Host] = r.TLS
				}
			}
		}
	}
	want := map[string]contract.Certificate{}
	challenges := map[string]contract.Challenge{}
	for _, id := range slices.Sorted(maps.Keys(v.states)) {
		for _, c := range v.states[id].Certificates {
			if _, ok := want[c.Host]; !ok && sourceFits(c.Source, modes[c.Host]) {
				want[c.Host] = c
			}
		}
		for _, c := range v.states[id].Challenges {
			challenges[c.Token] = c
		}
	}
	certs := slices.SortedFunc(maps.Values(want), func(a, b contract.Certificate) int { return strings.Compare(a.Host, b.Host) })
	chs := slices.SortedFunc(maps.Values(challenges), func(a, b contract.Challenge) int { return strings.Compare(a.Token, b.Token) })
	for _, d := range v.states {
		d.Certificates = slices.Clone(certs)
		d.Challenges = slices.Clone(chs)
	}
}

func sourceFits(source, mode string) bool {
	return (source == SourceACME && mode == contract.TLSAuto) || (source == SourceSecret && mode == contract.TLSSecret)
}

// ErrNoHosts is returned when there is no host to hand a certificate to.
var ErrNoHosts = errors.New("desired: no host")

// TLSNames returns the hostnames whose routes are served with TLSAuto, and
// the certificate each has now (if any): what the ACME client keeps valid.
func (s *States) TLSNames(ctx context.Context) (map[string]*contract.Certificate, error) {
	v, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]*contract.Certificate{}
	for _, d := range v.states {
		for _, w := range d.Workloads {
			for _, r := range w.Routes {
				if r.TLS == contract.TLSAuto {
					out[r.Host] = nil
				}
			}
		}
	}
	for _, d := range v.states {
		for _, c := range d.Certificates {
			if _, ok := out[c.Host]; ok && c.Source == SourceACME {
				cc := c
				out[c.Host] = &cc
			}
		}
	}
	return out, nil
}

// PutCertificate hands an ACME certificate to every host.
func (s *States) PutCertificate(ctx context.Context, c contract.Certificate) error {
	c.Source = SourceACME
	return s.update(ctx, func(v *view) error {
		if len(v.states) == 0 {
			return ErrNoHosts
		}
		v.setCertificate(c)
		return nil
	})
}

// SetChallenge adds (add) or removes (by token) an ACME challenge on every
// host.
func (s *States) SetChallenge(ctx context.Context, c contract.Challenge, add bool) error {
	return s.update(ctx, func(v *view) error {
		for _, d := range v.states {
			d.Challenges = slices.DeleteFunc(slices.Clone(d.Challenges), func(o contract.Challenge) bool { return o.Token == c.Token })
			if add {
				d.Challenges = append(d.Challenges, c)
			}
		}
		return nil
	})
}

// ChallengeWaiting returns the live hosts whose latest status report does
// not list the challenge's token yet: the ACME order proceeds once there are
// none. Hosts down or removed are not waited for; the CA is not sent to them.
func (s *States) ChallengeWaiting(ctx context.Context, token string) ([]string, error) {
	hosts, err := s.fleet.Hosts(ctx)
	if err != nil {
		return nil, fmt.Errorf("list hosts: %w", err)
	}
	var waiting []string
	for _, h := range hosts {
		if h.Removed || h.State != placement.HostLive {
			continue
		}
		st, err := s.statuses.Status(ctx, h.ID)
		if errors.Is(err, store.ErrNotFound) {
			waiting = append(waiting, h.Name)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("status of %s: %w", h.ID, err)
		}
		var rep contract.StatusReport
		if err := json.Unmarshal(st.Report, &rep); err != nil || !slices.Contains(rep.Challenges, token) {
			waiting = append(waiting, h.Name)
		}
	}
	return waiting, nil
}

// TLSName is a hostname served over HTTPS and the certificate it has.
type TLSName struct {
	Host string
	Mode string // contract.TLSAuto or contract.TLSSecret
	Cert *contract.Certificate
}

// TLSHosts lists the hostnames served over HTTPS, sorted, with their
// certificates.
func (s *States) TLSHosts(ctx context.Context) ([]TLSName, error) {
	v, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	byHost := map[string]*TLSName{}
	for _, d := range v.states {
		for _, w := range d.Workloads {
			for _, r := range w.Routes {
				if r.TLS != contract.TLSOff {
					byHost[r.Host] = &TLSName{Host: r.Host, Mode: r.TLS}
				}
			}
		}
	}
	for _, d := range v.states {
		for _, c := range d.Certificates {
			if n := byHost[c.Host]; n != nil && n.Cert == nil {
				cc := c
				n.Cert = &cc
			}
		}
	}
	out := make([]TLSName, 0, len(byHost))
	for _, h := range slices.Sorted(maps.Keys(byHost)) {
		out = append(out, *byHost[h])
	}
	return out, nil
}
