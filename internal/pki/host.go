package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// Host certificates.
//
// Hosts prove who they are to each other (the mesh between agents) with
// certificates from a host CA of their own, kept beside the server's CA but
// never mixed with it: a host certificate is not signed by the CA clients
// pin, and carries no DNS name or IP address, so no client of the control
// plane can take a host for the server; and the mesh trusts only the host
// CA, so the serving certificate is no host. A host certificate names its
// host by one URI SAN, hatch://host/<id>, and nothing else; its key is made
// on the host and only its public half, in a CSR, ever leaves it.

const (
	hostURIScheme = "hatch"
	// HostURIDomain is the host part of every host's URI: the one name the
	// host CA may sign.
	HostURIDomain = "host"
)

// hostIDPattern is what a host ID may be, so that it sits in a URI as it is.
var hostIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidHostID reports whether id may name a host in a host certificate.
func ValidHostID(id string) bool { return hostIDPattern.MatchString(id) }

// HostURI is the one name a host certificate carries: hatch://host/<id>.
func HostURI(hostID string) *url.URL {
	return &url.URL{Scheme: hostURIScheme, Host: HostURIDomain, Path: "/" + hostID}
}

// HostIDFromCert returns the host ID a host certificate names. It checks the
// form only (exactly one URI SAN hatch://host/<id>, no other name, both key
// usages): the chain must have been verified against the host CA already.
func HostIDFromCert(cert *x509.Certificate) (string, error) {
	if len(cert.DNSNames)+len(cert.IPAddresses)+len(cert.EmailAddresses) > 0 || len(cert.URIs) != 1 {
		return "", errors.New("not a host certificate: it must name one hatch://host/<id> URI and nothing else")
	}
	u := cert.URIs[0]
	id, ok := strings.CutPrefix(u.Path, "/")
	if u.Scheme != hostURIScheme || u.Host != HostURIDomain || u.User != nil || u.RawQuery != "" || u.Fragment != "" ||
		!ok || !ValidHostID(id) {
		return "", fmt.Errorf("not a host certificate: URI %q is not hatch://host/<id>", u)
	}
	return id, nil
}

// NewHostKey makes a host's private key (ECDSA P-256), on the host.
func NewHostKey() (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("make host key: %w", err)
	}
	return key, nil
}

// HostCSR makes the certificate request (PEM) a host sends for its key. It
// names the host's URI too when hostID is known (a join's is not yet), for
// the reader's sake: the CA takes only the key.
func HostCSR(key crypto.Signer, hostID string) ([]byte, error) {
	tmpl := &x509.CertificateRequest{}
	if hostID != "" {
		tmpl.URIs = []*url.URL{HostURI(hostID)}
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		return nil, fmt.Errorf("make certificate request: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// HostKeyPEM encodes a host key as PEM (PKCS #8, "PRIVATE KEY").
func HostKeyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode host key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// HostCertificate is a host's certificate with its key, checked to belong
// together and to name the host.
type HostCertificate struct {
	tls.Certificate
	HostID string
}

// ParseHostCertificate pairs a host certificate (PEM) with its key (PEM) and
// checks that the certificate names a host.
func ParseHostCertificate(certPEM, keyPEM []byte) (HostCertificate, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return HostCertificate{}, fmt.Errorf("host certificate: %w", err)
	}
	id, err := HostIDFromCert(pair.Leaf)
	if err != nil {
		return HostCertificate{}, err
	}
	return HostCertificate{Certificate: pair, HostID: id}, nil
}

// RenewAt is when a certificate is renewed: at half its life, so that a
// control plane out for a while still leaves days to spare.
func RenewAt(cert *x509.Certificate) time.Time {
	return cert.NotBefore.Add(cert.NotAfter.Sub(cert.NotBefore) / 2)
}

// ParseCertificatePEM parses the first PEM certificate of data.
func ParseCertificatePEM(data []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}
