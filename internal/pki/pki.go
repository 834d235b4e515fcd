// Package pki is what both sides of Hatchery read and check of its
// certificates and tokens: the token format, a certificate's fingerprint and
// the client configuration pinned to it, and a host's key, certificate
// request and certificate. The certificate authorities that sign them are the
// control plane's own, in pki/authority; the agent and the mesh need only
// this package.
//
// Every token the server prints carries the hex SHA-256 of its CA
// certificate's DER (its fingerprint); a client pins that fingerprint and
// verifies the served chain against the pinned certificate, host name
// included. No client ever skips verification.
package pki

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Fingerprint returns the hex SHA-256 of a certificate's DER encoding.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// ErrFingerprintMismatch is returned when no certificate the server presented
// has the pinned fingerprint.
var ErrFingerprintMismatch = errors.New("the server's certificate does not match the fingerprint in the token")

// ClientConfig returns a client configuration that trusts exactly the server
// whose chain contains a certificate with the given fingerprint (the CA, or a
// self-signed serving certificate), and verifies the serving certificate
// against it, expiry included, for host (the host name or IP address the client
// dials: the TLS state carries no server name for an IP address, so it is
// given here).
func ClientConfig(fingerprint, host string) (*tls.Config, error) {
	fingerprint = strings.ToLower(fingerprint)
	if b, err := hex.DecodeString(fingerprint); err != nil || len(b) != sha256.Size {
		return nil, fmt.Errorf("bad CA fingerprint %q: want 64 hex digits", fingerprint)
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: host,
		// The standard verification is replaced, not dropped: VerifyConnection
		// below runs on every handshake and checks the chain and the host name
		// against the pinned certificate instead of the system roots.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyPinned(cs, fingerprint, host)
		},
	}, nil
}

func verifyPinned(cs tls.ConnectionState, fingerprint, host string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the server presented no certificate")
	}
	roots := x509.NewCertPool()
	intermediates := x509.NewCertPool()
	pinned := false
	for _, c := range cs.PeerCertificates {
		if Fingerprint(c.Raw) == fingerprint {
			roots.AddCert(c)
			pinned = true
		} else {
			intermediates.AddCert(c)
		}
	}
	if !pinned {
		return ErrFingerprintMismatch
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		DNSName:       host,
		Roots:         roots,
		Intermediates: intermediates,
	})
	if err != nil {
		return fmt.Errorf("verify server certificate: %w", err)
	}
	return nil
}
