package sqlstore

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Migrate applies, inside tx, every migration in migrations (files named
// migrations/<version>_<what>.sql, each backend its own) newer than the
// database's schema version, recording each in schema_migrations. A database
// from a newer binary is refused. The backend supplies the transaction, and
// whatever keeps two servers from migrating at once.
func Migrate(ctx context.Context, tx Execer, migrations fs.FS, log *zap.Logger) error {
	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(files)
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		applied_at BIGINT  NOT NULL)`); err != nil {
		return err
	}
	var current int
	if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return err
	}
	latest := 0
	for _, f := range files {
		version, err := migrationVersion(f)
		if err != nil {
			return err
		}
		latest = max(latest, version)
		if version <= current {
			continue
		}
		sqlText, err := fs.ReadFile(migrations, f)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, string(sqlText)); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)`,
			version, Millis(time.Now())); err != nil {
			return err
		}
		log.Info("applied migration", zap.String("file", path.Base(f)))
	}
	if current > latest {
		return fmt.Errorf("database schema version %d is newer than this binary's %d: use a newer hatch", current, latest)
	}
	return nil
}

// migrationVersion reads the number a migration file's name starts with.
func migrationVersion(file string) (int, error) {
	base := path.Base(file)
	num, _, ok := strings.Cut(base, "_")
	v, err := strconv.Atoi(num)
	if !ok || err != nil || v <= 0 {
		return 0, fmt.Errorf("migration %s: name must start with a positive number and _", base)
	}
	return v, nil
}
