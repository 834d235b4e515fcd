package authority

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"github.com/hatchery/hatchery/internal/pki"
)

// The host CA. Hosts prove who they are to each other (the mesh between
// agents) with certificates from a host CA of their own, kept beside the
// server's CA but never mixed with it; see package pki for what a host
// certificate names and how peers check it.

const (
	hostCAFile    = "host-ca.pem"
	hostCAKeyFile = "host-ca-key.pem"

	// MaxHostLifetime is the longest a host certificate lives: a host
	// removed from the cluster is refused by its peers at once through the
	// valid host set, and its certificate dies within this at the latest.
	MaxHostLifetime = 7 * 24 * time.Hour
	// hostBackdate covers clocks a little behind the control plane's.
	hostBackdate = 5 * time.Minute
)

// ErrBadCSR is returned by SignHost for a certificate request it will not
// sign: not PEM, not parsable, a bad signature, or a key of a kind not
// accepted. The caller answers 400.
var ErrBadCSR = errors.New("authority: bad certificate request")

// HostCAFiles are the files of the host CA in the server's TLS directory.
var HostCAFiles = []string{hostCAFile, hostCAKeyFile}

// HostCA signs host certificates. It is safe for concurrent use.
type HostCA struct {
	// Cert is the host CA's certificate: what peers put in their pools.
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// lifetime is how long the certificates it signs live.
	lifetime time.Duration
}

// LoadOrCreateHostCA loads the host CA kept in dir (the server's TLS
// directory: host-ca.pem and host-ca-key.pem, 0600), creating it at the first
// start. Its certificates live lifetime, at most MaxHostLifetime.
func LoadOrCreateHostCA(dir string, lifetime time.Duration, now time.Time) (*HostCA, error) {
	if lifetime <= 0 || lifetime > MaxHostLifetime {
		return nil, fmt.Errorf("host certificate lifetime %v: want more than 0 and at most %v", lifetime, MaxHostLifetime)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create tls dir: %w", err)
	}
	cert, key, err := loadPair(dir, hostCAFile, hostCAKeyFile)
	if errors.Is(err, os.ErrNotExist) {
		cert, key, err = newCA(now, "Hatchery host CA", constrainToHosts)
		if err == nil {
			err = writePair(dir, hostCAFile, hostCAKeyFile, [][]byte{cert.Raw}, key)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("host certificate authority: %w", err)
	}
	return &HostCA{Cert: cert, key: key, lifetime: lifetime}, nil
}

// constrainToHosts makes a CA able to name hosts and nothing else, whatever
// signs with it.
func constrainToHosts(ca *x509.Certificate) {
	ca.PermittedURIDomains = []string{pki.HostURIDomain}
	ca.ExcludedDNSDomains = []string{""}
	ca.ExcludedIPRanges = []*net.IPNet{{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}, {IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}}
	ca.PermittedDNSDomainsCritical = true
}

// CertPEM is the host CA's certificate in PEM, as joins and renewals send it.
func (ca *HostCA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// Lifetime is how long the certificates the CA signs live.
func (ca *HostCA) Lifetime() time.Duration { return ca.lifetime }

// SignHost issues the certificate of host hostID for the public key of
// csrPEM (a PEM "CERTIFICATE REQUEST" whose signature is checked, with an
// ECDSA P-256 or Ed25519 key). Only the key is taken from the request: the
// certificate names hostID, the caller's authenticated host, by the URI SAN
// hatch://host/<id> and nothing else, for client and server authentication,
// from now (less a few minutes of clock skew) for the CA's lifetime. It
// returns the certificate in PEM.
func (ca *HostCA) SignHost(csrPEM []byte, hostID string, now time.Time) ([]byte, error) {
	if !pki.ValidHostID(hostID) {
		return nil, fmt.Errorf("host ID %q: not one of letters, digits, '.', '_' and '-'", hostID)
	}
	pub, err := ParseHostCSR(csrPEM)
	if err != nil {
		return nil, err
	}
	notBefore := now.Add(-hostBackdate)
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		// No subject: the URI SAN (marked critical for it) is the only name.
		NotBefore:   notBefore,
		NotAfter:    notBefore.Add(ca.lifetime),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		URIs:        []*url.URL{pki.HostURI(hostID)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.key)
	if err != nil {
		return nil, fmt.Errorf("sign host certificate for %s: %w", hostID, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// ParseHostCSR returns the public key of a host's certificate request after
// checking its signature (the requester holds the key) and the key's kind.
// Every error wraps ErrBadCSR.
func ParseHostCSR(csrPEM []byte) (crypto.PublicKey, error) {
	block, _ := pem.Decode(csrPEM)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("%w: want one PEM block of type CERTIFICATE REQUEST", ErrBadCSR)
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadCSR, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: its signature does not verify: %w", ErrBadCSR, err)
	}
	switch k := csr.PublicKey.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("%w: ECDSA keys must be on P-256, not %s", ErrBadCSR, k.Curve.Params().Name)
		}
	case ed25519.PublicKey:
	default:
		return nil, fmt.Errorf("%w: a %T key: want ECDSA P-256 or Ed25519", ErrBadCSR, csr.PublicKey)
	}
	return csr.PublicKey, nil
}
