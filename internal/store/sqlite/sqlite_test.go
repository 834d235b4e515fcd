package sqlite

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/reconciler/storagetest"
	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/storetest"
)

func openTemp(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "hatch.db"), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Store { return openTemp(t) })
}

func TestReopenKeepsDataAndMigratesOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hatch.db")
	s, err := Open(t.Context(), path, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutStatus(t.Context(), "h1", []byte(`{}`), time.UnixMilli(1000)); err != nil {
		t.Fatal(err)
	}
	var mode string
	if err := s.db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v; want wal", mode, err)
	}
	s.Close()

	s, err = Open(t.Context(), path, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if _, err := s.Host(t.Context(), "h1"); err != nil {
		t.Fatalf("host lost across a reopen: %v", err)
	}
	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	var applied int
	if err := s.db.QueryRow(`SELECT COUNT(*) FROM schema_migrations`).Scan(&applied); err != nil || applied != len(files) {
		t.Fatalf("schema_migrations has %d rows (%v), want one per migration file (%d)", applied, err, len(files))
	}
}

func TestNewerSchemaIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hatch.db")
	s, err := Open(t.Context(), path, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`INSERT INTO schema_migrations (version, applied_at) VALUES (999, 0)`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err := Open(t.Context(), path, zaptest.NewLogger(t)); err == nil {
		s.Close()
		t.Fatal("a database from a newer binary was opened")
	} else if !strings.Contains(err.Error(), "newer") {
		t.Fatalf("error %q does not say the schema is newer", err)
	}
}

// The reconciler's own suite for its ResourceStorage, beside ours.
func TestReconcilerStorageSuite(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) reconciler.ResourceStorage { return openTemp(t) })
}

// TestDatabaseFilesAreOwnerOnly checks the database, its WAL and its shared
// memory file are 0600, new or left 0644 by an older version.
func TestDatabaseFilesAreOwnerOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hatch.db")
	files := []string{path, path + "-wal", path + "-shm"}
	check := func(when string) {
		t.Helper()
		for _, p := range files {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: %s is %04o, want 0600", when, filepath.Base(p), fi.Mode().Perm())
			}
		}
	}
	s, err := Open(t.Context(), path, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.PutStatus(t.Context(), "h1", []byte(`{}`), time.UnixMilli(1000)); err != nil {
		t.Fatal(err)
	}
	check("new")

	// An older version made them 0644; the store is open, so the WAL and
	// shared memory file are there to be found by the next Open.
	for _, p := range files {
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	again, err := Open(t.Context(), path, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	check("opened again after an older version")
}

// store.Tables is what a copy carries: it must name every table and column
// of this schema beside the store's own bookkeeping.
func TestTablesAreTheSchema(t *testing.T) {
	s := openTemp(t)
	rows, err := s.db.QueryContext(t.Context(), `SELECT m.name, p.name FROM sqlite_master m, pragma_table_info(m.name) p
		WHERE m.type = 'table' AND m.name NOT IN ('schema_migrations', 'sqlite_sequence') ORDER BY m.name, p.cid`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string][]string{}
	for rows.Next() {
		var table, column string
		if err := rows.Scan(&table, &column); err != nil {
			t.Fatal(err)
		}
		got[table] = append(got[table], column)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, name := range store.Uncopied {
		delete(got, name)
	}
	for _, table := range store.Tables {
		if !slices.Equal(got[table.Name], table.Columns) {
			t.Errorf("table %s has columns %v, store.Tables says %v", table.Name, got[table.Name], table.Columns)
		}
		delete(got, table.Name)
	}
	if len(got) > 0 {
		t.Errorf("tables not in store.Tables (a migration would not copy them): %v", got)
	}
}
