// Package authority keeps the control plane's two certificate authorities,
// in the server's TLS directory: the CA clients pin (by the fingerprint every
// token carries) with the serving certificate it signs, and the host CA that
// signs the hosts' mesh certificates. Only the control plane holds their
// keys; what hosts and clients check of the certificates is package pki's.
//
// At first start the server makes a private CA and a serving certificate
// signed by it; later starts keep the CA (and so every token printed) and
// make a new serving certificate when the old one no longer covers the
// server's names or nears its end.
package authority

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/hatchery/hatchery/internal/fsutil"
	"github.com/hatchery/hatchery/internal/pki"
)

const (
	caFile         = "ca.pem"
	caKeyFile      = "ca-key.pem"
	serverFile     = "server.pem"
	serverKeyFile  = "server-key.pem"
	caLifetime     = 10 * 365 * 24 * time.Hour
	serverLifetime = 365 * 24 * time.Hour
	// renewBefore is how close to expiry a serving certificate is replaced at start.
	renewBefore = 30 * 24 * time.Hour
)

// Server is the control plane's TLS material.
type Server struct {
	CA          *x509.Certificate
	certificate tls.Certificate // the serving certificate, its chain ending with CA
}

// Fingerprint is the CA's fingerprint, the one every token carries.
func (s *Server) Fingerprint() string { return pki.Fingerprint(s.CA.Raw) }

// TLSConfig returns the server side configuration: the serving certificate
// followed by the CA, so that a client holding only the fingerprint can verify.
func (s *Server) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{s.certificate},
	}
}

// LoadOrCreate loads the CA and serving certificate kept in dir, creating what
// is missing. The serving certificate is made anew when it does not cover every
// one of names (host names and IP addresses) or expires within 30 days; the CA,
// and so the fingerprint in every token already printed, stays.
func LoadOrCreate(dir string, names []string, now time.Time) (*Server, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create tls dir: %w", err)
	}
	ca, caKey, err := loadPair(dir, caFile, caKeyFile)
	if errors.Is(err, os.ErrNotExist) {
		ca, caKey, err = newCA(now, "Hatchery control plane CA", nil)
		if err == nil {
			err = writePair(dir, caFile, caKeyFile, [][]byte{ca.Raw}, caKey)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("certificate authority: %w", err)
	}

	leaf, leafKey, err := loadPair(dir, serverFile, serverKeyFile)
	if err == nil && (!covers(leaf, names) || now.Add(renewBefore).After(leaf.NotAfter) || leaf.CheckSignatureFrom(ca) != nil) {
		err = os.ErrNotExist // stale: make a new one below
	}
	if errors.Is(err, os.ErrNotExist) {
		leaf, leafKey, err = newLeaf(ca, caKey, names, now)
		if err == nil {
			err = writePair(dir, serverFile, serverKeyFile, [][]byte{leaf.Raw, ca.Raw}, leafKey)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	return &Server{
		CA: ca,
		certificate: tls.Certificate{
			Certificate: [][]byte{leaf.Raw, ca.Raw},
			PrivateKey:  leafKey,
			Leaf:        leaf,
		},
	}, nil
}

// CAFiles are the files of dir that CreateCA writes and LoadOrCreate reads:
// the CA's certificate and its key.
var CAFiles = []string{caFile, caKeyFile}

// CreateCA makes a new control-plane CA in dir (made 0700 if missing) and
// returns its fingerprint, the one tokens carry. It refuses to replace a CA
// already there: every token and every host pinned to it would be orphaned.
// Each server that LoadOrCreate's this dir later signs its own serving
// certificate with it, so every server is trusted by the same pin.
func CreateCA(dir string, now time.Time) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create tls dir: %w", err)
	}
	for _, f := range CAFiles {
		if _, err := os.Lstat(filepath.Join(dir, f)); err == nil || !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("certificate authority: %s exists: it is left as it is", filepath.Join(dir, f))
		}
	}
	ca, caKey, err := newCA(now, "Hatchery control plane CA", nil)
	if err == nil {
		err = writePair(dir, caFile, caKeyFile, [][]byte{ca.Raw}, caKey)
	}
	if err != nil {
		return "", fmt.Errorf("certificate authority: %w", err)
	}
	return pki.Fingerprint(ca.Raw), nil
}

// DefaultNames are the names a serving certificate covers unless told more:
// localhost, the loopback addresses and the machine's host name.
func DefaultNames() []string {
	names := []string{"localhost", "127.0.0.1", "::1"}
	if h, err := os.Hostname(); err == nil && h != "" {
		names = append(names, h)
	}
	return names
}

func covers(cert *x509.Certificate, names []string) bool {
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
				return false
			}
		} else if !slices.Contains(cert.DNSNames, n) {
			return false
		}
	}
	return true
}

// newCA makes a self-signed CA named name, valid for caLifetime, that signs
// leaf certificates only; constrain, if given, narrows what it may name.
func newCA(now time.Time, name string, constrain func(*x509.Certificate)) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	if constrain != nil {
		constrain(tmpl)
	}
	return sign(tmpl, tmpl, key, key)
}

func newLeaf(ca *x509.Certificate, caKey *ecdsa.PrivateKey, names []string, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "Hatchery control plane"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(serverLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	return sign(tmpl, ca, key, caKey)
}

func sign(tmpl, parent *x509.Certificate, key, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sign certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err)) // the platform cannot make keys either
	}
	return n
}

// writePair writes certificates and the key (PEM, 0600: like everything in
// a data dir, for its owner only), each atomically, so a crash leaves either
// the old pair or the new one.
func writePair(dir, certName, keyName string, ders [][]byte, key *ecdsa.PrivateKey) error {
	var certPEM []byte
	for _, der := range ders {
		certPEM = append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, keyName), keyPEM, 0o600); err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(filepath.Join(dir, certName), certPEM, 0o600)
}

func loadPair(dir, certName, keyName string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, certName))
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, keyName))
	if err != nil {
		return nil, nil, err
	}
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return nil, nil, fmt.Errorf("%s: no PEM certificate", certName)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", certName, err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, nil, fmt.Errorf("%s: no PEM key", keyName)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", keyName, err)
	}
	return cert, key, nil
}
