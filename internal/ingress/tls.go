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
	"time"

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
func (in *Ingress) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	name := strings.TrimSuffix(strings.ToLower(hello.ServerName), ".")
	if slices.Contains(hello.SupportedProtos, acmeTLSALPN) {
		// A CA validating TLS-ALPN-01: only the challenge's certificate.
		if cert, ok := in.alpn.Load().byHost[name]; ok {
			in.m.challenges.Inc()
			in.log.Info("ACME TLS-ALPN-01 challenge answered", zap.String("host", name))
			return cert, nil
		}
		return nil, fmt.Errorf("no ACME TLS-ALPN-01 challenge for %q", name)
	}
	if cert, ok := in.certs.Load().byHost[name]; ok {
		return cert, nil
	}
	in.m.tlsUnknown.Inc()
	return nil, fmt.Errorf("no certificate for %q", name)
}

// hasCertificate reports whether a certificate for host (as a Host header
// gives it) is loaded. A TLS route is redirected to HTTPS only then: until
// its first certificate arrives it is served over plain HTTP, never sent
// to a handshake that must fail.
func (in *Ingress) hasCertificate(host string) bool {
	_, ok := in.certs.Load().byHost[canonicalHost(host)]
	return ok
}

// serveChallenge answers an ACME HTTP-01 request whose token is in the
// table, and reports whether it did. Unknown tokens fall through to the
// routes (an application may answer its own challenges).
func (in *Ingress) serveChallenge(w http.ResponseWriter, r *http.Request) bool {
	token := strings.TrimPrefix(r.URL.Path, acmeChallengePath)
	keyAuth, ok := (*in.challenges.Load())[token]
	if !ok {
		return false
	}
	in.m.challenges.Inc()
	in.log.Info("ACME challenge answered", zap.String("host", r.Host), zap.String("token", token), zap.String("from", r.RemoteAddr))
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte(keyAuth))
	return true
}

// secure reports whether the client's request came over HTTPS: on the
// HTTPS listener, or from a trusted proxy that says so.
func (in *Ingress) secure(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	return r.Header.Get("X-Forwarded-Proto") == "https" && trusted(in.cfg.TrustedProxies, r.RemoteAddr)
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
func (in *Ingress) redirect(w http.ResponseWriter, r *http.Request) {
	in.m.redirects.Inc()
	http.Redirect(w, r, httpsURL(r.Host, in.httpsPort.Load(), r.URL.RequestURI()), http.StatusPermanentRedirect)
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

// startHTTPS listens on Config.HTTPSAddr and serves the same handler as
// HTTP behind TLS, with HTTP/2. A failure to listen is kept for
// HTTPSProblem: the host serves HTTP all the same. The caller holds mu.
func (in *Ingress) startHTTPS() {
	ln, err := net.Listen("tcp", in.cfg.HTTPSAddr)
	if err != nil {
		problem := fmt.Sprintf("HTTPS listener %s: %v (HTTP keeps serving)", in.cfg.HTTPSAddr, err)
		in.httpsProblem.Store(&problem)
		in.log.Error("ingress cannot serve HTTPS", zap.String("addr", in.cfg.HTTPSAddr), zap.Error(err))
		return
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok {
		in.httpsPort.Store(int32(tcp.Port))
	}
	in.httpsLn = ln
	in.httpsSrv = &http.Server{
		Handler:           in,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          warnLog(in.log),
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: in.getCertificate,
			NextProtos:     []string{"h2", "http/1.1", acmeTLSALPN},
		},
	}
	srv := in.httpsSrv
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		if err := srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
			in.log.Error("ingress HTTPS server stopped", zap.Stringer("addr", ln.Addr()), zap.Error(err))
		}
	}()
}

// HTTPSAddr returns the address Start listens on for HTTPS, or nil.
func (in *Ingress) HTTPSAddr() net.Addr {
	in.mu.Lock()
	defer in.mu.Unlock()
	return addrOf(in.httpsLn)
}

// HTTPSProblem says why the ingress does not serve HTTPS although
// Config.HTTPSAddr asks it to, or "".
func (in *Ingress) HTTPSProblem() string {
	if p := in.httpsProblem.Load(); p != nil {
		return *p
	}
	return ""
}

// Challenges returns the tokens of the ACME challenges the ingress answers.
func (in *Ingress) Challenges() []string {
	m := *in.challenges.Load()
	out := make([]string, 0, len(m))
	for t := range m {
		out = append(out, t)
	}
	return append(out, *in.alpnTokens.Load()...)
}
