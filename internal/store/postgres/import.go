package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/hatchery/hatchery/internal/store"
)

// ErrNotEmpty refuses to import into a database that holds a store already.
var ErrNotEmpty = errors.New("postgres: the database holds a Hatchery store already")

// Export is the source of an import: it hands every row of store.Tables to
// each, table by table in that order, and returns the source's counters
// (sqlite.Store.Export is one).
type Export func(ctx context.Context, each func(t store.Table, row []any) error) (store.Counters, error)

// Import copies another store into this one, in one transaction: all of it
// or nothing. The database must hold no rows yet (ErrNotEmpty otherwise), so
// a second run of `hatch server migrate` cannot mix two stores. Event
// sequence numbers and apply IDs are kept, and the counters continue after
// the source's. It returns how many rows each table received.
func (s *Store) Import(ctx context.Context, from Export) (map[string]int64, error) {
	copied := map[string]int64{}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.Serializable}, func(tx pgx.Tx) error {
		// Nobody writes while we copy: a server started on this database
		// waits, and then sees all of it.
		for _, t := range store.Tables {
			if _, err := tx.Exec(ctx, `LOCK TABLE `+t.Name+` IN EXCLUSIVE MODE`); err != nil {
				return err
			}
		}
		if err := checkEmpty(ctx, tx); err != nil {
			return err
		}
		var pending store.Table
		var rows [][]any
		flush := func() error {
			if len(rows) == 0 {
				return nil
			}
			n, err := tx.CopyFrom(ctx, pgx.Identifier{pending.Name}, pending.Columns, pgx.CopyFromRows(rows))
			if err != nil {
				return fmt.Errorf("copy %s: %w", pending.Name, err)
			}
			copied[pending.Name] += n
			rows = rows[:0]
			return nil
		}
		counters, err := from(ctx, func(t store.Table, row []any) error {
			if t.Name != pending.Name {
				if err := flush(); err != nil {
					return err
				}
				pending = t
			}
			rows = append(rows, row)
			if len(rows) == 1000 {
				return flush()
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := flush(); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE event_counter SET seq = GREATEST($1, (SELECT COALESCE(MAX(seq), 0) FROM events))`,
			counters[store.CounterEvents]); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT setval(pg_get_serial_sequence('applies', 'id'),
			GREATEST($1, (SELECT COALESCE(MAX(id), 0) FROM applies), 1), GREATEST($1, (SELECT COALESCE(MAX(id), 0) FROM applies)) > 0)`,
			counters[store.CounterApplies])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	return copied, nil
}

// checkEmpty refuses a database with any row in a store table.
// CheckEmpty returns ErrNotEmpty if the database holds a store's rows
// already (blobs do not count: they are content-addressed, and copying them
// twice keeps one), so a migration can refuse before it copies anything.
func (s *Store) CheckEmpty(ctx context.Context) error {
	return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error { return checkEmpty(ctx, tx) })
}

func checkEmpty(ctx context.Context, tx pgx.Tx) error {
	var full []string
	for _, t := range store.Tables {
		var any bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+t.Name+`)`).Scan(&any); err != nil {
			return err
		}
		if any {
			full = append(full, t.Name)
		}
	}
	if len(full) > 0 {
		return fmt.Errorf("%w (rows in %s): migrate into a new, empty database", ErrNotEmpty, strings.Join(full, ", "))
	}
	return nil
}
