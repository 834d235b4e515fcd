package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/blob"
	"github.com/hatchery/hatchery/internal/serverd"
	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/postgres"
	"github.com/hatchery/hatchery/internal/store/sqlite"
)

func newServerMigrateCmd() *cobra.Command {
	var from, to, blobs string
	cmd := &cobra.Command{
		Use:   "migrate --from <sqlite file> --to postgres://user@host:port/database",
		Short: "Copy a server's SQLite store into an empty PostgreSQL database",
		Long: `Copy everything a server keeps in its SQLite file (projects and their records,
desired states, hosts and their reports, tokens, join tokens, events, applies,
plans, leases, secret values, still sealed) into an empty PostgreSQL database, in
one transaction, and the blobs (uploaded build contexts) of its data dir's
blobs/ (or --blobs) into the database's blob store, where every server on it
serves them. Stop the server first: what it writes during the copy is not
copied. Blobs are copied first, each checked against its digest; a copy that
failed can simply be run again.

Then start the server with the same data dir (its tls/, seal.key and
admin-token are not in the database) and --store postgres://... (or
HATCH_STORE): it shows the same hatch status, and the agents carry on with the
identities they have, without joining again. The password goes in a password file (PGPASSFILE,
~/.pgpass) or in HATCH_STORE, never on the command line.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServerMigrate(cmd.Context(), from, to, blobs, os.Getenv(storeEnv), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the SQLite file to copy (a server's <data-dir>/hatch.db)")
	cmd.Flags().StringVar(&to, "to", "", "the PostgreSQL database to copy into (default: "+storeEnv+")")
	cmd.Flags().StringVar(&blobs, "blobs", "", "the blob directory to copy (default: blobs/ beside the SQLite file, if there is one)")
	return cmd
}

func runServerMigrate(ctx context.Context, from, to, blobDir, env string, stdout, stderr io.Writer) error {
	if from == "" {
		return errors.New("--from: name the SQLite file to copy (a server's <data-dir>/hatch.db)")
	}
	if _, err := os.Stat(from); err != nil {
		return fmt.Errorf("--from %s: %w", from, err)
	}
	blobsGiven := blobDir != ""
	if !blobsGiven {
		blobDir = filepath.Join(filepath.Dir(from), "blobs")
	}
	if _, err := os.Stat(blobDir); err != nil && (blobsGiven || !errors.Is(err, fs.ErrNotExist)) {
		return fmt.Errorf("--blobs %s: %w", blobDir, err)
	} else if err != nil {
		blobDir = "" // a server that never stored a blob
	}
	if to == "" && env == "" {
		return errors.New("--to: name the PostgreSQL database to copy into (postgres://user@host:port/database), or set " + storeEnv)
	}
	dst, err := serverd.ResolveStore(to, env, "")
	if err != nil {
		return err
	}
	if dst.PostgresURL == "" {
		return fmt.Errorf("the target %s is not a PostgreSQL database: want postgres://user@host:port/database", dst)
	}
	log := newServerLogger(stderr)
	defer func() { _ = log.Sync() }()
	src, err := sqlite.Open(ctx, from, log)
	if err != nil {
		return err
	}
	defer src.Close()
	pg, err := postgres.Open(ctx, dst.PostgresURL, log)
	if err != nil {
		return err
	}
	defer pg.Close()
	// Refused before anything is copied; blobs go first, so that a failed
	// copy leaves no rows and can be run again.
	if err := pg.CheckEmpty(ctx); err != nil {
		return err
	}
	nBlobs, nBytes, err := copyBlobs(ctx, blobDir, pg.Blobs())
	if err != nil {
		return err
	}
	copied, err := pg.Import(ctx, src.Export)
	if err != nil {
		return err
	}
	for _, t := range store.Tables {
		fmt.Fprintf(stdout, "%-16s %d rows\n", t.Name, copied[t.Name])
	}
	fmt.Fprintf(stdout, "%-16s %d (%d bytes)\n", "blobs", nBlobs, nBytes)
	fmt.Fprintf(stdout, "copied %s into PostgreSQL: start the server with the same --data-dir and --store postgres://... (or %s)\n",
		from, storeEnv)
	return nil
}

// copyBlobs copies every blob of the file store in dir (none if dir is "")
// into to, streaming each and checking it against its digest.
func copyBlobs(ctx context.Context, dir string, to blob.Storage) (n int, bytes int64, err error) {
	if dir == "" {
		return 0, 0, nil
	}
	from, err := blob.Open(dir)
	if err != nil {
		return 0, 0, fmt.Errorf("--blobs: %w", err)
	}
	list, err := from.List(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("--blobs: %w", err)
	}
	for _, b := range list {
		if err := copyBlob(ctx, from, to, b); err != nil {
			return n, bytes, fmt.Errorf("copy blob %s from %s (the rows are not copied yet: run again): %w", b.Digest, dir, err)
		}
		n, bytes = n+1, bytes+b.Size
	}
	return n, bytes, nil
}

func copyBlob(ctx context.Context, from, to blob.Storage, b blob.Info) error {
	r, _, err := from.Open(ctx, b.Digest)
	if err != nil {
		return err
	}
	defer r.Close()
	_, _, err = to.Put(ctx, b.Digest, r, b.Size)
	return err
}
