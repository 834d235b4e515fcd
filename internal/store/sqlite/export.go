package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/hatchery/hatchery/internal/store"
)

// Export reads every row of store.Tables, table by table, in one read
// transaction (one consistent snapshot), handing each to each, and returns
// the counters of the events and applies. It is what `hatch server migrate`
// copies from.
func (s *Store) Export(ctx context.Context, each func(t store.Table, row []any) error) (store.Counters, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	defer tx.Rollback()
	for _, t := range store.Tables {
		if err := exportTable(ctx, tx, t, each); err != nil {
			return nil, fmt.Errorf("export %s: %w", t.Name, err)
		}
	}
	counters := store.Counters{}
	rows, err := tx.QueryContext(ctx, `SELECT name, seq FROM sqlite_sequence WHERE name IN ($1, $2)`,
		store.CounterEvents, store.CounterApplies)
	if err != nil {
		return nil, fmt.Errorf("export counters: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var seq int64
		if err := rows.Scan(&name, &seq); err != nil {
			return nil, fmt.Errorf("export counters: %w", err)
		}
		counters[name] = seq
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("export counters: %w", err)
	}
	return counters, nil
}

func exportTable(ctx context.Context, tx *sql.Tx, t store.Table, each func(store.Table, []any) error) error {
	rows, err := tx.QueryContext(ctx, `SELECT `+strings.Join(t.Columns, ", ")+` FROM `+t.Name+` ORDER BY rowid`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		row := make([]any, len(t.Columns))
		ptrs := make([]any, len(row))
		for i := range row {
			ptrs[i] = &row[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return err
		}
		for i, v := range row {
			if b, ok := v.([]byte); ok { // text comes back as bytes from some drivers
				row[i] = string(b)
			}
		}
		if err := each(t, row); err != nil {
			return err
		}
	}
	return rows.Err()
}
