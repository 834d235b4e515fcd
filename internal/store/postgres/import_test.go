package postgres

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/sqlite"
	"github.com/hatchery/hatchery/internal/store/storetest"
)

func TestImportFromSQLiteReadsBackTheSame(t *testing.T) {
	src, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "hatch.db"), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	storetest.Fill(t, src)
	dst := openCallerClock(t) // the suite's lease is at t0, in 2023
	copied, err := dst.Import(t.Context(), src.Export)
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"resources", "hosts", "desired_states", "events", "applies", "tokens", "join_tokens",
		"host_identities", "leases", "plans", "secret_values", "blob_retention", "apply_blobs"} {
		if copied[table] == 0 {
			t.Errorf("no row of %s copied: %v", table, copied)
		}
	}
	storetest.AssertSameContents(t, src, dst)

	// A second import would mix two stores: refused, and nothing changes.
	before, _ := dst.ListEvents(t.Context(), 0, 10000)
	if _, err := dst.Import(t.Context(), src.Export); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("a second import: %v, want ErrNotEmpty", err)
	}
	if after, _ := dst.ListEvents(t.Context(), 0, 10000); len(after) != len(before) {
		t.Fatalf("a refused import changed the events: %d then %d", len(before), len(after))
	}
}

// store.Tables is what a copy carries: it must name every table and column
// of this schema beside the store's own bookkeeping and the blob tables
// (`hatch server migrate` copies blobs through the blob store).
func TestTablesAreTheSchema(t *testing.T) {
	s := openTemp(t)
	rows, err := s.pool.Query(t.Context(), `SELECT table_name, column_name FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name NOT IN ('schema_migrations', 'event_counter',
			'blobs', 'blob_uploads', 'blob_chunks')
		ORDER BY table_name, ordinal_position`)
	if err != nil {
		t.Fatal(err)
	}
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
