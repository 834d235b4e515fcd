package ingress

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"
)

// acmeChallengePath is where an ACME CA fetches HTTP-01 key authorizations.
// These requests are answered over plain HTTP, never redirected: a CA
// validating a first certificate cannot speak HTTPS to the host yet.
const acmeChallengePath = "/.well-known/acme-challenge/"

// hstsValue is the Strict-Transport-Security of a route with HSTS: a year,
// the host only (subdomains may be other projects' routes).
const hstsValue = "max-age=31536000"

// acmeTLSALPN is the ALPN protocol of ACME's TLS-ALPN-01 validation.
const acmeTLSALPN = "acme-tls/1"

// forwardedHTTPSKey marks a request a trusted proxy says came over HTTPS.
type forwardedHTTPSKey struct{}

// certTable is the HTTPS listener's certificates by lowercase hostname,
// immutable once built so handshakes read it without a lock.
type certTable struct {
	byHost map[string]*tls.Certificate
	// byChain keeps the parsed pairs by chain and key, so an Update that
	// carries the same certificate does not parse it again.
	byChain map[string]*tls.Certificate
}

// tlsState is what the ingress serves over TLS and how plain HTTP reaches
// it: the certificates picked by SNI, the ACME challenges (HTTP-01 key
// authorizations and TLS-ALPN-01 certificates), the trusted proxies whose
// X-Forwarded-Proto is believed, and the HTTPS port redirects name. Update
// replaces the tables whole; handshakes and requests read them without a
// lock.
type tlsState struct {
	log            *zap.Logger
	m              *metrics
	trustedProxies []netip.Prefix

	certs      atomic.Pointer[certTable]
	challenges atomic.Pointer[map[string]string] // key authorizations by token
	// alpn are the TLS-ALPN-01 challenge certificates by host, and
	// alpnTokens their tokens, for Challenges.
	alpn       atomic.Pointer[certTable]
	alpnTokens atomic.Pointer[[]string]
	// httpsPort is the HTTPS listener's port, for redirects; zero until it
	// listens.
	httpsPort atomic.Int32
}

func newTLSState(log *zap.Logger, m *metrics, trustedProxies []netip.Prefix) *tlsState {
	s := &tlsState{log: log, m: m, trustedProxies: trustedProxies}
	s.certs.Store(&certTable{})
	s.challenges.Store(&map[string]string{})
	s.alpn.Store(&certTable{})
	s.alpnTokens.Store(&[]string{})
	return s
}

// update loads the table's certificates and challenges. A certificate that
// does not parse is reported and left out (its host keeps the one it had);
// the rest applies.
func (s *tlsState) update(t Table) error {
	certs, certErr := loadCertificates(t.Certificates, s.certs.Load(), false)
	s.certs.Store(certs)
	alpn, alpnErr := loadCertificates(t.ALPNChallenges, s.alpn.Load(), true)
	s.alpn.Store(alpn)
	var tokens []string
	for _, c := range t.ALPNChallenges {
		if _, ok := alpn.byHost[strings.TrimSuffix(strings.ToLower(c.Host), ".")]; ok {
			tokens = append(tokens, c.Token)
		}
	}
	s.alpnTokens.Store(&tokens)
	challenges := make(map[string]string, len(t.Challenges))
	for token, keyAuth := range t.Challenges {
		challenges[token] = keyAuth
	}
	s.challenges.Store(&challenges)
	return errors.Join(certErr, alpnErr)
}

// tokens returns the tokens of the ACME challenges answered, of both kinds.
func (s *tlsState) tokens() []string {
	m := *s.challenges.Load()
	out := make([]string, 0, len(m))
	for t := range m {
		out = append(out, t)
	}
	return append(out, *s.alpnTokens.Load()...)
}

// loadCertificates parses the table's certificates, reusing the previous
// table's parse of an unchanged pair. A pair that does not parse is
// reported, naming its host, never its key, and the host keeps the
// certificate it had, if any.
func loadCertificates(certs []Certificate, prev *certTable, alpn bool) (*certTable, error) {
	out := &certTable{byHost: make(map[string]*tls.Certificate, len(certs)), byChain: make(map[string]*tls.Certificate, len(certs))}
	var errs []error
	defer func() {
		for _, c := range certs {
			host := strings.TrimSuffix(strings.ToLower(c.Host), ".")
			if _, ok := out.byHost[host]; !ok && prev.byHost[host] != nil {
				out.byHost[host] = prev.byHost[host]
			}
		}
	}()
	for _, c := range certs {
		host := strings.TrimSuffix(strings.ToLower(c.Host), ".")
		id := string(c.Chain) + "\x00" + string(c.Key)
		if cert, ok := prev.byChain[id]; ok {
			out.byHost[host], out.byChain[id] = cert, cert
			continue
		}
		cert, err := tls.X509KeyPair(c.Chain, c.Key)
		if err != nil {
			errs = append(errs, fmt.Errorf("certificate of %s: %v", host, redactKeyError(err)))
			continue
		}
		if cert.Leaf == nil {
			if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
				errs = append(errs, fmt.Errorf("certificate of %s: %w", host, err))
				continue
			}
		}
		if err := cert.Leaf.VerifyHostname(host); err != nil && !alpn {
			errs = append(errs, fmt.Errorf("certificate of %s: %w", host, err))
			continue
		}
		out.byHost[host], out.byChain[id] = &cert, &cert
	}
	return out, errors.Join(errs...)
}

// redactKeyError keeps crypto/tls's message (it names what is wrong, never
// the key's bytes) as an error value without wrapping, so nothing but its
// text travels on.
func redactKeyError(err error) error { return errors.New(err.Error()) }

// getCertificate picks the certificate by SNI. A handshake without SNI
// (an IP) or for a name without a certificate fails: there is no default
// certificate to leak names from.
func (s *tlsState) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	name := strings.TrimSuffix(strings.ToLower(hello.ServerName), ".")
	if slices.Contains(hello.SupportedProtos, acmeTLSALPN) {
		// A CA validating TLS-ALPN-01: only the challenge's certificate.
		if cert, ok := s.alpn.Load().byHost[name]; ok {
			s.m.challenges.Inc()
			s.log.Info("ACME TLS-ALPN-01 challenge answered", zap.String("host", name))
			return cert, nil
		}
		return nil, fmt.Errorf("no ACME TLS-ALPN-01 challenge for %q", name)
	}
	if cert, ok := s.certs.Load().byHost[name]; ok {
		return cert, nil
	}
	s.m.tlsUnknown.Inc()
	return nil, fmt.Errorf("no certificate for %q", name)
}

// hasCertificate reports whether a certificate for host (as a Host header
// gives it) is loaded. A TLS route is redirected to HTTPS only then: until
// its first certificate arrives it is served over plain HTTP, never sent
// to a handshake that must fail.
func (s *tlsState) hasCertificate(host string) bool {
	_, ok := s.certs.Load().byHost[canonicalHost(host)]
	return ok
}

// serveChallenge answers an ACME HTTP-01 request whose token is in the
// table, and reports whether it did. Unknown tokens fall through to the
// routes (an application may answer its own challenges).
func (s *tlsState) serveChallenge(w http.ResponseWriter, r *http.Request) bool {
	token := strings.TrimPrefix(r.URL.Path, acmeChallengePath)
	keyAuth, ok := (*s.challenges.Load())[token]
	if !ok {
		return false
	}
	s.m.challenges.Inc()
	s.log.Info("ACME challenge answered", zap.String("host", r.Host), zap.String("token", token), zap.String("from", r.RemoteAddr))
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte(keyAuth))
	return true
}

// secure reports whether the client's request came over HTTPS: on the
// HTTPS listener, or from a trusted proxy that says so.
func (s *tlsState) secure(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	return r.Header.Get("X-Forwarded-Proto") == "https" && trusted(s.trustedProxies, r.RemoteAddr)
}

// trusted reports whether remote ("ip:port") is in one of the prefixes.
func trusted(prefixes []netip.Prefix, remote string) bool {
	if len(prefixes) == 0 {
		return false
	}
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return false
	}
	ip := ap.Addr().Unmap()
	for _, p := range prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// redirect sends a plain HTTP request to the same URL over HTTPS (308:
// the method and body are kept), on the HTTPS listener's port when it is
// not 443.
func (s *tlsState) redirect(w http.ResponseWriter, r *http.Request) {
	s.m.redirects.Inc()
	http.Redirect(w, r, httpsURL(r.Host, s.httpsPort.Load(), r.URL.RequestURI()), http.StatusPermanentRedirect)
}

// httpsURL is the HTTPS URL of a request for host (as its Host header
// gives it) and requestURI, on port (0 or 443: the default).
func httpsURL(host string, port int32, requestURI string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != 0 && port != 443 {
		host += ":" + strconv.Itoa(int(port))
	}
	return "https://" + host + requestURI
}
