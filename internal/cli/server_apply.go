package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/provider"
	"github.com/hatchery/hatchery/internal/seal"
	"github.com/hatchery/hatchery/internal/server"
	"github.com/hatchery/hatchery/internal/store/sqlite"
)

// applyDeps wires the apply protocol over the embedded store: the providers
// that turn projects into desired state, the leases and the plans.
func applyDeps(st *sqlite.Store, box *seal.Box, dataDir string, log *zap.Logger) (*server.ApplyDeps, error) {
	set, err := provider.New(provider.Deps{
		Desired: st, Statuses: st, Records: st, Events: st, Secrets: st,
		Fleet:  provider.StoreFleet{List: st, Identities: st, Reports: st},
		Box:    box,
		Logger: log.With(zap.String("component", "providers")),
	})
	if err != nil {
		return nil, err
	}
	id, err := serverID(dataDir)
	if err != nil {
		return nil, err
	}
	return &server.ApplyDeps{Resources: st, Plans: st, Leases: st, Providers: set, ServerID: id}, nil
}

// serverID names this server in the leases it holds: the same after a
// restart (so it releases what its previous life held), and apart from any
// other server on another machine or data dir.
func serverID(dataDir string) (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("server id: %w", err)
	}
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return "", fmt.Errorf("server id: %w", err)
	}
	return host + ":" + dir, nil
}
