package serverd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/blob"
	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/postgres"
	"github.com/hatchery/hatchery/internal/store/sqlite"
)

// StoreEnv names the variable `hatch server` reads its store from when
// --store is not given: the one place a PostgreSQL URL may carry a password
// (a command line is visible to every user of the machine).
const StoreEnv = "HATCH_STORE"

// controlStore is everything the control plane keeps, in one store: what
// wire hands to the providers, the apply protocol, the fleet and the
// API. Both *sqlite.Store and *postgres.Store are one.
type controlStore interface {
	reconciler.ResourceStorage
	store.Liveness
	store.Statuses
	store.DesiredStates
	store.Events
	store.BlobRetention
	store.ApplyHistory
	store.Projects
	store.AdminTokens
	store.JoinTokens
	store.Members
	store.Leases
	store.Plans
	store.SecretValues
	store.ServerRegistry
	store.HostCapacities
	store.Runs
	store.ScheduleStates
	store.VolumeTasks
	store.NotifyCursor
	store.RegistryLogins
	io.Closer
}

var (
	_ controlStore = (*sqlite.Store)(nil)
	_ controlStore = (*postgres.Store)(nil)
)

// StoreLocation is where a server keeps its state: a SQLite file, or a
// PostgreSQL database.
type StoreLocation struct {
	SQLitePath  string
	PostgresURL string // may hold a password: never printed
}

// String names the store for messages, without a password or user.
func (l StoreLocation) String() string {
	if l.PostgresURL != "" {
		return "PostgreSQL"
	}
	return "sqlite:" + l.SQLitePath
}

// ResolveStore reads the --store flag, else the HATCH_STORE variable's value
// env, else takes the SQLite file in the data dir. Schemes are matched
// whatever their case. A password is refused in the flag, and no error repeats
// the value: one that does not parse may be a URL with a typo in its scheme,
// or a key=value connection string, either holding a password.
func ResolveStore(flag, env, dataDir string) (StoreLocation, error) {
	value, from := flag, "--store"
	if value == "" {
		value, from = env, StoreEnv
	}
	const sqliteScheme = "sqlite:"
	switch {
	case value == "":
		return StoreLocation{SQLitePath: filepath.Join(dataDir, "hatch.db")}, nil
	case len(value) > len(sqliteScheme) && strings.EqualFold(value[:len(sqliteScheme)], sqliteScheme):
		return StoreLocation{SQLitePath: value[len(sqliteScheme):]}, nil
	case postgres.IsURL(value):
		value = postgres.CanonicalURL(value)
		withPassword, err := postgres.HasPassword(value)
		if err != nil {
			return StoreLocation{}, fmt.Errorf("%s: %w", from, err)
		}
		if withPassword && from == "--store" {
			return StoreLocation{}, errors.New("--store: the PostgreSQL URL holds a password, which every user of this machine " +
				"can read in the process list: pass the URL in the " + StoreEnv + " variable instead, or keep the password " +
				"in a password file (PGPASSFILE, ~/.pgpass)")
		}
		return StoreLocation{PostgresURL: value}, nil
	case strings.Contains(value, "="):
		return StoreLocation{}, errors.New(from + ": a key=value connection string is not read here: " +
			"write it as a URL, postgres://user@host:port/database?option=value (the value is not repeated here)")
	}
	return StoreLocation{}, errors.New(from + ": want sqlite:<path> or postgres://user@host:port/database (the value is not repeated here)")
}

// openBlobs opens the blob store that goes with st: on PostgreSQL its chunk
// rows, which every server on the database serves; on SQLite the files of
// <data-dir>/blobs. Blob files left in a data dir now served from PostgreSQL
// are named in a warning: `hatch server migrate` copies them.
func openBlobs(ctx context.Context, st controlStore, dataDir string, log *zap.Logger) (blob.Storage, error) {
	dir := filepath.Join(dataDir, "blobs")
	pg, ok := st.(*postgres.Store)
	if !ok {
		return blob.Open(dir)
	}
	if _, err := os.Stat(dir); err == nil {
		files, err := blob.Open(dir)
		if err != nil {
			return nil, err
		}
		if n, _ := files.Bytes(ctx); n > 0 {
			log.Warn("the data dir holds blob files that a server on PostgreSQL does not serve: "+
				"hatch server migrate --from <sqlite file> copies them (its --blobs)", zap.String("dir", dir), zap.Int64("bytes", n))
		}
	}
	return pg.Blobs(), nil
}

// openStore opens (and migrates) the store at loc.
func openStore(ctx context.Context, loc StoreLocation, log *zap.Logger) (controlStore, error) {
	if loc.PostgresURL != "" {
		return postgres.Open(ctx, loc.PostgresURL, log)
	}
	return sqlite.Open(ctx, loc.SQLitePath, log)
}
