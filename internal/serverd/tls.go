package serverd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/hatchery/hatchery/internal/fsutil"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/pki/authority"
)

// serving is how the server is reached: its TLS configuration (nil for
// plain HTTP) and the fingerprint every token it issues carries.
type serving struct {
	tls         *tls.Config
	fingerprint string
	// leaf is the serving certificate, to pick the address the local CLI
	// config names (nil for plain HTTP).
	leaf *x509.Certificate
}

// TLS is how the server serves its API: hatch server's --tls-cert,
// --tls-key, --tls-name and --insecure-http.
type TLS struct {
	// CertFile and KeyFile are the operator's serving certificate (PEM, its
	// chain after it) and its key; none: the server's own CA signs one.
	CertFile, KeyFile string
	// Names are extra host names or IP addresses the server's own serving
	// certificate covers.
	Names []string
	// InsecureHTTP serves plain HTTP, on loopback only.
	InsecureHTTP bool
}

// loadServing makes the server's transport. By default the CA kept in
// <data-dir>/tls signs a serving certificate for the machine's names and
// addresses, the listen address and the extra names; --tls-cert/--tls-key use
// the operator's certificate instead, and the last certificate of its chain
// is the one tokens pin. --insecure-http serves plain HTTP, tokens still
// carrying the CA's fingerprint so that they stay the same once TLS is on.
func loadServing(opts TLS, dataDir, listen string, now time.Time) (serving, error) {
	if (opts.CertFile == "") != (opts.KeyFile == "") {
		return serving{}, errors.New("--tls-cert and --tls-key go together: give both, or neither to use the server's own CA")
	}
	if opts.CertFile != "" {
		if opts.InsecureHTTP {
			return serving{}, errors.New("--insecure-http serves plain HTTP: it cannot be used with --tls-cert")
		}
		pair, err := tls.LoadX509KeyPair(opts.CertFile, opts.KeyFile)
		if err != nil {
			return serving{}, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			return serving{}, fmt.Errorf("--tls-cert: %w", err)
		}
		pinned := pair.Certificate[len(pair.Certificate)-1]
		return serving{
			tls:         &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}},
			fingerprint: pki.Fingerprint(pinned),
			leaf:        leaf,
		}, nil
	}
	material, err := authority.LoadOrCreate(filepath.Join(dataDir, "tls"), certNames(listen, opts.Names), now)
	if err != nil {
		return serving{}, err
	}
	if opts.InsecureHTTP {
		return serving{fingerprint: material.Fingerprint()}, nil
	}
	cfg := material.TLSConfig()
	return serving{tls: cfg, fingerprint: material.Fingerprint(), leaf: cfg.Certificates[0].Leaf}, nil
}

// certNames are the names the serving certificate covers: the defaults
// (localhost, loopback, the host name), the machine's addresses, the listen
// address when it is a specific one, and the extra names.
func certNames(listen string, extra []string) []string {
	names := authority.DefaultNames()
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipNet, ok := a.(*net.IPNet); ok && ipNet.IP.IsGlobalUnicast() {
				names = append(names, ipNet.IP.String())
			}
		}
	}
	if host, _, err := net.SplitHostPort(listen); err == nil && host != "" {
		if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
			names = append(names, host)
		}
	}
	names = append(names, extra...)
	slices.Sort(names)
	return slices.Compact(names)
}

// localURL is the URL a CLI on this machine reaches the server at: the
// listen address when it is a specific one, else the loopback address (or,
// for an operator's certificate that does not cover it, its first name).
func localURL(addr net.Addr, srv serving) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	if srv.tls == nil {
		return "http://" + net.JoinHostPort(host, port)
	}
	if srv.leaf != nil && srv.leaf.VerifyHostname(host) != nil {
		switch {
		case srv.leaf.VerifyHostname("localhost") == nil:
			host = "localhost"
		case len(srv.leaf.DNSNames) > 0:
			host = srv.leaf.DNSNames[0]
		case len(srv.leaf.IPAddresses) > 0:
			host = srv.leaf.IPAddresses[0].String()
		}
	}
	return "https://" + net.JoinHostPort(host, port)
}

// onLoopback reports whether a listen address is a loopback one.
func onLoopback(addr net.Addr) bool {
	host, _, err := net.SplitHostPort(addr.String())
	ip := net.ParseIP(host)
	return err == nil && ip != nil && ip.IsLoopback()
}

// checkPlainHTTP refuses --insecure-http unless the server listens on
// loopback only: anywhere else tokens would cross the network in the clear.
// A host name is looked up, and every address it has must be a loopback
// one. It runs before the server makes any state; Run checks the
// listener's own address again once it listens.
func checkPlainHTTP(ctx context.Context, opts TLS, listen string) error {
	if !opts.InsecureHTTP {
		return nil
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", listen, err)
	}
	var ips []net.IP
	if ip := net.ParseIP(host); ip != nil || host == "" {
		ips = append(ips, ip) // nil: every interface
	} else if addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host); err != nil {
		return fmt.Errorf("--listen %q: %w", listen, err)
	} else {
		for _, a := range addrs {
			ips = append(ips, a.IP)
		}
	}
	for _, ip := range ips {
		if ip == nil || !ip.IsLoopback() {
			return errPlainHTTPOffLoopback(listen)
		}
	}
	return nil
}

func errPlainHTTPOffLoopback(listen string) error {
	return fmt.Errorf("--insecure-http with --listen %q: plain HTTP is served on loopback only, since tokens would "+
		"cross the network in the clear; listen on 127.0.0.1 (e.g. --listen 127.0.0.1:7700), or serve HTTPS: drop "+
		"--insecure-http (the server's own CA), or behind a proxy that terminates TLS give --tls-cert/--tls-key "+
		"with the proxy's certificate chain (tokens then pin it)", listen)
}

// repinTokenFile makes the token file carry the fingerprint the server now
// serves (after a switch to --tls-cert, say): the secret, and so the stored
// hash, stay. It returns the token as the file now holds it.
func repinTokenFile(path, fingerprint string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read admin token: %w", err)
	}
	tok, err := pki.ParseToken(string(data))
	if err != nil {
		return "", fmt.Errorf("admin token file %s: %w", path, err)
	}
	if tok.Fingerprint == fingerprint {
		return tok.String(), nil
	}
	tok.Fingerprint = fingerprint
	if err := fsutil.WriteFileAtomic(path, []byte(tok.String()+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write admin token: %w", err)
	}
	return tok.String(), nil
}
