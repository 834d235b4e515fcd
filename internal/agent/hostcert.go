package agent

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/fsutil"
	"github.com/hatchery/hatchery/internal/pki"
)

// Files of the host certificate in the data directory: the key (0600, made
// here, never sent), the certificate and the host CA.
const (
	hostKeyFile  = "host-key.pem"
	hostCertFile = "host.pem"
	hostCAFile   = "host-ca.pem"
)

// Renewal retries: a failed renewal is tried again after renewRetryMin,
// doubling to renewRetryMax, well within the half-life left.
const (
	renewRetryMin = 5 * time.Second
	renewRetryMax = 5 * time.Minute
)

// ErrNoHostCertificate is returned by HostCertificate before the first
// certificate came (an agent that joined before host certificates, while
// the control plane cannot be reached).
var ErrNoHostCertificate = errors.New("agent: no host certificate yet: the control plane has not issued one")

// CertificateRenewer gets a host certificate for a CSR from the control
// plane; HTTPClient is one.
type CertificateRenewer interface {
	RenewCertificate(ctx context.Context, csrPEM []byte) (api.HostCertificate, error)
}

// HostCerts keeps this host's certificate for the mesh: loaded from the data
// directory, renewed at half-life with a key made anew, kept on disk before
// it is used. It gives the mesh the current certificate at every handshake
// (mesh.Certificates). Safe for concurrent use.
type HostCerts struct {
	dir     string
	hostID  string
	renewer CertificateRenewer
	now     func() time.Time
	log     *zap.Logger

	mu   sync.RWMutex // guards cert and pool
	cert *tls.Certificate
	pool *x509.CertPool
}

// OpenHostCerts loads the host certificate kept in dataDir, if any and if it
// is this host's: a missing, mismatched or foreign one is left for Ensure
// or Run to replace.
func OpenHostCerts(dataDir, hostID string, renewer CertificateRenewer, log *zap.Logger) (*HostCerts, error) {
	if renewer == nil || log == nil {
		return nil, errors.New("host certificates: a renewer and a logger are needed")
	}
	h := &HostCerts{dir: dataDir, hostID: hostID, renewer: renewer, now: time.Now, log: log.With(zap.String("component", "host-certificate"))}
	cert, pool, err := loadHostFiles(dataDir, hostID)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		h.log.Warn("the kept host certificate is not usable: a new one will be asked for", zap.Error(err))
	default:
		h.cert, h.pool = cert, pool
	}
	return h, nil
}

// HostCertificate returns the current certificate (mesh.Certificates).
func (h *HostCerts) HostCertificate() (*tls.Certificate, error) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.cert == nil {
		return nil, ErrNoHostCertificate
	}
	return h.cert, nil
}

// HostCA returns the pool of the host CA that issued the current
// certificate: the mesh's only roots. Nil before the first certificate.
func (h *HostCerts) HostCA() *x509.CertPool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.pool
}

// renewAt is when the current certificate is to be renewed; the zero time
// (at once) when there is none.
func (h *HostCerts) renewAt() time.Time {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.cert == nil {
		return time.Time{}
	}
	return pki.RenewAt(h.cert.Leaf)
}

// Ensure renews the certificate now if there is none or it is past its
// half-life; otherwise it does nothing.
func (h *HostCerts) Ensure(ctx context.Context) error {
	if at := h.renewAt(); !at.IsZero() && h.now().Before(at) {
		return nil
	}
	return h.Renew(ctx)
}

// Renew makes a new key, has the control plane sign it, keeps key,
// certificate and host CA in the data directory and then uses them.
func (h *HostCerts) Renew(ctx context.Context) error {
	key, err := pki.NewHostKey()
	if err != nil {
		return err
	}
	csr, err := pki.HostCSR(key, h.hostID)
	if err != nil {
		return err
	}
	got, err := h.renewer.RenewCertificate(ctx, csr)
	if err != nil {
		return err
	}
	keyPEM, err := pki.HostKeyPEM(key)
	if err != nil {
		return err
	}
	return h.install(keyPEM, got)
}

// install checks a certificate answer against the key, keeps it on disk and
// makes it current.
func (h *HostCerts) install(keyPEM []byte, got api.HostCertificate) error {
	cert, pool, err := parseHostFiles([]byte(got.Certificate), keyPEM, []byte(got.HostCA), h.hostID)
	if err != nil {
		return fmt.Errorf("the control plane's host certificate: %w", err)
	}
	if err := writeHostFiles(h.dir, keyPEM, []byte(got.Certificate), []byte(got.HostCA)); err != nil {
		return err
	}
	h.mu.Lock()
	h.cert, h.pool = cert, pool
	h.mu.Unlock()
	h.log.Info("host certificate installed", zap.Time("not_after", cert.Leaf.NotAfter), zap.Time("renew_at", pki.RenewAt(cert.Leaf)))
	return nil
}

// Run renews the certificate at its half-life (at once when there is none),
// retrying a failed renewal with a back-off, until ctx ends.
func (h *HostCerts) Run(ctx context.Context) {
	retry := time.Duration(0)
	for {
		wait := h.renewAt().Sub(h.now())
		if retry > 0 {
			wait = retry
		}
		timer := time.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		if err := h.Ensure(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			retry = min(max(2*retry, renewRetryMin), renewRetryMax)
			h.log.Warn("host certificate renewal failed: retrying", zap.Duration("retry_in", retry), zap.Error(err))
			continue
		}
		retry = 0
	}
}

// JoinHost joins the control plane at server with a join token and keeps
// what the join gives in dataDir: the identity (host ID, host token, the
// server's CA) and the host certificate for the mesh. The host's key is made
// here and never sent: the join carries its CSR. A certificate that cannot be
// kept is not fatal (the renewal route gives another), and is logged.
func JoinHost(ctx context.Context, dataDir, server, joinToken, name string, log *zap.Logger) (Identity, error) {
	key, err := pki.NewHostKey()
	if err != nil {
		return Identity{}, err
	}
	csr, err := pki.HostCSR(key, "")
	if err != nil {
		return Identity{}, err
	}
	joined, err := Join(ctx, server, joinToken, name, csr)
	if err != nil {
		return Identity{}, err
	}
	id := joined.Identity
	if err := SaveIdentity(dataDir, id, joined.CAPEM); err != nil {
		return Identity{}, err
	}
	log.Info("joined the control plane", zap.String("host", id.HostID), zap.String("server", id.Server))
	if err := keepJoinCertificate(dataDir, id.HostID, key, joined.HostCert); err != nil {
		log.Warn("the join's host certificate was not kept: it will be asked for again", zap.Error(err))
	}
	return id, nil
}

// keepJoinCertificate keeps the host certificate a join gave, for key; a
// server older than host certificates gave none, and that is not an error.
func keepJoinCertificate(dataDir, hostID string, key crypto.Signer, got api.HostCertificate) error {
	if got.Certificate == "" {
		return nil
	}
	keyPEM, err := pki.HostKeyPEM(key)
	if err != nil {
		return err
	}
	if _, _, err := parseHostFiles([]byte(got.Certificate), keyPEM, []byte(got.HostCA), hostID); err != nil {
		return fmt.Errorf("the join's host certificate: %w", err)
	}
	return writeHostFiles(dataDir, keyPEM, []byte(got.Certificate), []byte(got.HostCA))
}

// parseHostFiles pairs a certificate with its key and checks that it names
// hostID and chains to the host CA given.
func parseHostFiles(certPEM, keyPEM, caPEM []byte, hostID string) (*tls.Certificate, *x509.CertPool, error) {
	hc, err := pki.ParseHostCertificate(certPEM, keyPEM)
	if err != nil {
		return nil, nil, err
	}
	if hc.HostID != hostID {
		return nil, nil, fmt.Errorf("the certificate names host %s, not this host %s", hc.HostID, hostID)
	}
	ca, err := pki.ParseCertificatePEM(caPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("host CA: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	if _, err := hc.Leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: hc.Leaf.NotBefore.Add(time.Minute),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, nil, fmt.Errorf("the certificate is not the host CA's: %w", err)
	}
	return &hc.Certificate, pool, nil
}

func loadHostFiles(dir, hostID string) (*tls.Certificate, *x509.CertPool, error) {
	var data [3][]byte
	for i, name := range []string{hostCertFile, hostKeyFile, hostCAFile} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, nil, err
		}
		data[i] = b
	}
	return parseHostFiles(data[0], data[1], data[2], hostID)
}

// writeHostFiles keeps the key, certificate and host CA (0600, as every
// file of the data dir), each atomically, the key first: a crash between
// them leaves a key that does not match the certificate, which the next
// start sees and renews.
func writeHostFiles(dir string, keyPEM, certPEM, caPEM []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	for _, f := range []struct {
		name string
		data []byte
		perm os.FileMode
	}{{hostKeyFile, keyPEM, 0o600}, {hostCertFile, certPEM, 0o600}, {hostCAFile, caPEM, 0o600}} {
		if err := fsutil.WriteFileAtomic(filepath.Join(dir, f.name), f.data, f.perm); err != nil {
			return fmt.Errorf("keep host certificate: %w", err)
		}
	}
	return nil
}

// ReadHostCertificate reads the host certificate, key and host CA kept in
// dataDir, checked as OpenHostCerts checks them: the data plane serves the
// mesh with the certificate the agent renews there (see package dataplane).
// A missing file is fs.ErrNotExist.
func ReadHostCertificate(dataDir, hostID string) (*tls.Certificate, *x509.CertPool, error) {
	return loadHostFiles(dataDir, hostID)
}
