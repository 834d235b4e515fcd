package dataplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io/fs"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/agent"
)

// certReload is how often the data plane reads the host certificate again
// on its own; the agent also asks it to after a renewal (POST reload-certs)
// and at its start. Certificates are renewed at half-life, so a minute late
// is harmless.
const certReload = time.Minute

// fileCerts is the host certificate as the agent keeps it in the data
// directory (mesh.HostCertificates): the agent renews it, the data plane
// reads it. Safe for concurrent use.
type fileCerts struct {
	dir, hostID string
	log         *zap.Logger

	mu   sync.RWMutex // guards cert and pool
	cert *tls.Certificate
	pool *x509.CertPool
}

// reload reads the files again; a missing or broken set keeps what was read
// before (the agent writes each file atomically, the key first).
func (c *fileCerts) reload() error {
	cert, pool, err := agent.ReadHostCertificate(c.dir, c.hostID)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.cert, c.pool = cert, pool
	c.mu.Unlock()
	return nil
}

// run reloads every certReload until ctx ends.
func (c *fileCerts) run(ctx context.Context) {
	t := time.NewTicker(certReload)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := c.reload(); err != nil && !errors.Is(err, fs.ErrNotExist) {
				c.log.Warn("host certificate not reloaded: the mesh keeps the one it has", zap.Error(err))
			}
		}
	}
}

func (c *fileCerts) HostCertificate() (*tls.Certificate, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.cert == nil {
		return nil, agent.ErrNoHostCertificate
	}
	return c.cert, nil
}

// HostCA is nil until a certificate was read; the mesh node asks every
// second until then, and each ask reads the files, so that the mesh starts
// as soon as the agent got its first certificate.
func (c *fileCerts) HostCA() *x509.CertPool {
	c.mu.RLock()
	pool := c.pool
	c.mu.RUnlock()
	if pool == nil && c.reload() == nil {
		c.mu.RLock()
		pool = c.pool
		c.mu.RUnlock()
	}
	return pool
}
