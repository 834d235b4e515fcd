package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/postgres"
	"github.com/hatchery/hatchery/internal/store/sqlite"
)

func newServerMigrateCmd() *cobra.Command {
	var from, to string
	cmd := &cobra.Command{
		Use:   "migrate --from <sqlite file> --to postgres://user@host:port/database",
		Short: "Copy a server's SQLite store into an empty PostgreSQL database",
		Long: `Copy everything a server keeps in its SQLite file (projects and their records,
desired states, hosts and their reports, tokens, join tokens, events, applies,
plans, leases, secret values, still sealed) into an empty PostgreSQL database, in
one transaction. Stop the server first: what it writes during the copy is not
copied.

Then start the server with the same data dir (its tls/, seal.key, admin-token and
blobs/ are not in the database) and --store postgres://... (or HATCH_STORE): it
shows the same hatch status, and the agents carry on with the identities they
have, without joining again. The password goes in a password file (PGPASSFILE,
~/.pgpass) or in HATCH_STORE, never on the command line.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServerMigrate(cmd.Context(), from, to, os.Getenv(storeEnv), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the SQLite file to copy (a server's <data-dir>/hatch.db)")
	cmd.Flags().StringVar(&to, "to", "", "the PostgreSQL database to copy into (default: "+storeEnv+")")
	return cmd
}

func runServerMigrate(ctx context.Context, from, to, env string, stdout, stderr io.Writer) error {
	if from == "" {
		return errors.New("--from: name the SQLite file to copy (a server's <data-dir>/hatch.db)")
	}
	if _, err := os.Stat(from); err != nil {
		return fmt.Errorf("--from %s: %w", from, err)
	}
	if to == "" && env == "" {
		return errors.New("--to: name the PostgreSQL database to copy into (postgres://user@host:port/database), or set " + storeEnv)
	}
	dst, err := resolveStore(to, env, "")
	if err != nil {
		return err
	}
	if dst.postgresURL == "" {
		return fmt.Errorf("the target %s is not a PostgreSQL database: want postgres://user@host:port/database", dst)
	}
	log := newServerLogger(stderr)
	defer func() { _ = log.Sync() }()
	src, err := sqlite.Open(ctx, from, log)
	if err != nil {
		return err
	}
	defer src.Close()
	pg, err := postgres.Open(ctx, dst.postgresURL, log)
	if err != nil {
		return err
	}
	defer pg.Close()
	copied, err := pg.Import(ctx, src.Export)
	if err != nil {
		return err
	}
	for _, t := range store.Tables {
		fmt.Fprintf(stdout, "%-16s %d rows\n", t.Name, copied[t.Name])
	}
	fmt.Fprintf(stdout, "copied %s into PostgreSQL: start the server with the same --data-dir and --store postgres://... (or %s)\n",
		from, storeEnv)
	return nil
}
