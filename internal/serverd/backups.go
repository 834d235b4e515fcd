package serverd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/backup"
	"github.com/hatchery/hatchery/internal/backup/s3store"
	"github.com/hatchery/hatchery/internal/blob"
	"github.com/hatchery/hatchery/internal/desired"
	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/volumes"
)

// backupKeyFile keeps the cluster's backup key (hex of 32 random bytes),
// apart from seal.key: with it and the bucket, a new control plane lists
// and restores every backup. Written by `hatch server init` with the other
// shared files; a first start makes it if missing (see loadBackupKey).
const backupKeyFile = "backup.key"

// The environment a --backup-store bucket is reached through, beside the
// credentials s3store.LoadCredentials reads: never a flag.
const (
	EnvS3Endpoint = "AWS_ENDPOINT_URL"
	EnvS3Region   = "AWS_REGION"
)

// loadBackupKey returns the cluster's backup key. A first start on SQLite
// makes it if missing; on PostgreSQL, whose servers must share one, only
// while the database records no volume task yet (a new cluster, started
// without hatch server init: no backup depends on a key), and a server
// that finds backups recorded and no key is refused rather than given a
// key of its own that opens none of them.
func loadBackupKey(ctx context.Context, dataDir string, loc StoreLocation, tasks store.VolumeTasks) ([]byte, error) {
	create := loc.PostgresURL == ""
	if !create {
		list, err := tasks.ListVolumeTasks(ctx, store.VolumeTaskFilter{Forgotten: true, Limit: 1})
		if err != nil {
			return nil, err
		}
		create = len(list) == 0
	}
	return BackupKey(dataDir, create)
}

// BackupKey returns the cluster's backup key from the data dir, making it
// first if create is set and it is missing.
func BackupKey(dataDir string, create bool) ([]byte, error) {
	path := filepath.Join(dataDir, backupKeyFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && create {
		key := make([]byte, backup.KeySize)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		if err := writeBackupKey(path, key); err != nil {
			return nil, err
		}
		return key, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("--data-dir: no backup key (%s): every server of a cluster needs the same one; copy it from "+
			"another server's data dir, or write a new cluster's with hatch server init", path)
	}
	if err != nil {
		return nil, fmt.Errorf("--data-dir: the backup key: %w", err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(data)))
	if err != nil || len(key) != backup.KeySize {
		return nil, fmt.Errorf("--data-dir: the backup key in %s is not %d bytes in hex", path, backup.KeySize)
	}
	return key, nil
}

func writeBackupKey(path string, key []byte) error {
	if err := os.WriteFile(path, []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
		return fmt.Errorf("write the backup key: %w", err)
	}
	return nil
}

// openBackupStore returns where backups go: the bucket of --backup-store,
// or the control plane's blob store.
func openBackupStore(url string, getenv func(string) string, blobs blob.Storage, tasks store.VolumeTasks) (backup.Store, error) {
	if url == "" {
		return &volumes.BlobStore{Blobs: blobs, Tasks: tasks}, nil
	}
	creds, err := s3store.LoadCredentials(getenv)
	if err != nil {
		return nil, fmt.Errorf("--backup-store: %w", err)
	}
	cfg := s3store.Config{URL: url, Endpoint: getenv(EnvS3Endpoint), Region: getenv(EnvS3Region), Credentials: creds}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("--backup-store (endpoint from %s, region from %s): %w", EnvS3Endpoint, EnvS3Region, err)
	}
	st, err := s3store.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("--backup-store: %w", err)
	}
	return st, nil
}

// newBackups is the backups service over the store, the hosts' desired
// states and the backup store: its API and data routes on every server,
// its loop and schedule with the background loops.
func newBackups(st controlStore, states *desired.States, bs backup.Store, key []byte, serverID string, log *zap.Logger) (*volumes.Service, error) {
	return volumes.New(volumes.DefaultConfig(), volumes.Deps{Tasks: st, Leases: st, Events: st, Retention: st, Records: st,
		Hosts: st, Desired: states, Store: bs, ClusterKey: key, ServerID: serverID, Logger: log, Now: time.Now})
}
