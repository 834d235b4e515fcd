package dataplane

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/ingress"
	"github.com/hatchery/hatchery/internal/mesh"
)

// Files of the data plane in the data directory.
const (
	socketFile = "dataplane.sock" // the control API (0600)
	lockFile   = "dataplane.lock" // flocked by the one data plane
	configFile = "dataplane.json" // the Config the agent wants served
	logFile    = "dataplane.log"  // the detached process's stdout and stderr
)

// Config is what a data plane serves: the agent writes it to the data
// directory (configFile) and the process it starts reads it there, so the
// settings are declared once for both. An agent whose Config differs from
// the running data plane's replaces it (a new address cannot be handed
// over).
type Config struct {
	DataDir string
	// HostID names the host certificate the mesh serves with.
	HostID string
	// IngressAddr, HTTPSAddr, AdminAddr and PublishAddr are the ingress's
	// HTTPAddr, HTTPSAddr, AdminAddr and PublishAddr.
	IngressAddr, HTTPSAddr, AdminAddr, PublishAddr string
	TrustedProxies                                 []netip.Prefix
	// HoldTimeout overrides ingress.DefaultConfig's when non-zero.
	HoldTimeout time.Duration
	// MeshAddr is where the mesh port listens.
	MeshAddr string
}

// Validate reports every setting that cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("no data directory (--data-dir)"))
	}
	if c.HostID == "" {
		errs = append(errs, errors.New("no host ID"))
	}
	if c.MeshAddr == "" {
		errs = append(errs, errors.New("no mesh address (--mesh-addr)"))
	}
	if c.HoldTimeout < 0 {
		errs = append(errs, fmt.Errorf("--hold-timeout %s: want a positive duration", c.HoldTimeout))
	}
	return errors.Join(errs...)
}

// SocketPath is the control socket of the data plane of dataDir.
func SocketPath(dataDir string) string { return filepath.Join(dataDir, socketFile) }

// LogPath is where the detached data plane of dataDir logs.
func LogPath(dataDir string) string { return filepath.Join(dataDir, logFile) }

// ingressConfig is the ingress's Config for c, reaching peers through
// peers and opening its listeners through ls.
func (c Config) ingressConfig(peers ingress.Peers, ls ingress.Listeners, log *zap.Logger) ingress.Config {
	cfg := ingress.DefaultConfig()
	cfg.HTTPAddr, cfg.AdminAddr, cfg.PublishAddr, cfg.HTTPSAddr = c.IngressAddr, c.AdminAddr, c.PublishAddr, c.HTTPSAddr
	if c.HoldTimeout > 0 {
		cfg.HoldTimeout = c.HoldTimeout
	}
	cfg.TrustedProxies = c.TrustedProxies
	cfg.Logger, cfg.Registry, cfg.Peers, cfg.Listeners = log, prometheus.NewRegistry(), peers, ls
	return cfg
}

// meshConfig is the mesh node's Config.
func meshConfig(log *zap.Logger) mesh.Config {
	cfg := mesh.DefaultConfig()
	cfg.Logger = log
	return cfg
}
