package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/sqlstore"
)

// dialect is how SQLite differs, for the shared store: no row locks, since
// this process serialises its writes (writeMu); text sorts byte by byte
// already (the BINARY collation); terms are measured by the times callers
// give, the one clock of the one server a SQLite file has.
var dialect = sqlstore.Dialect{
	LockRow:       "",
	ByteOrder:     "",
	Now:           `CAST(unixepoch('now', 'subsec') * 1000 AS INTEGER)`,
	DatabaseClock: false,
	StorableText:  func(s string) string { return s },
}

// sqlStore is the shared store, embedded under an unexported name so that
// this package's API stays its Store's methods.
type sqlStore = sqlstore.Store

// querier is what *sql.DB and *sql.Tx both offer.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// shared adapts the database or a transaction to the shared store's Reader
// (and a transaction to its Execer).
type shared struct{ q querier }

func (a shared) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return sharedRow{a.q.QueryRowContext(ctx, query, args...)}
}

func (a shared) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	rows, err := a.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sharedRows{rows}, nil
}

// Exec is the shared store's Exec, on a transaction.
func (a shared) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := a.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// sharedTx adapts a write transaction to the shared store's Tx.
type sharedTx struct {
	shared
	tx *txn
}

func (t sharedTx) AppendEvent(ctx context.Context, e store.Event) (int64, error) {
	return t.tx.appendEvent(ctx, e)
}

// ExecEach runs the statement, prepared once, for each list of arguments.
func (t sharedTx) ExecEach(ctx context.Context, query string, args [][]any) ([]int64, error) {
	stmt, err := t.tx.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer stmt.Close()
	out := make([]int64, len(args))
	for i, a := range args {
		res, err := stmt.ExecContext(ctx, a...)
		if err != nil {
			return nil, err
		}
		if out[i], err = res.RowsAffected(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (t sharedTx) WakeHosts(ids ...string) { t.tx.Hosts = append(t.tx.Hosts, ids...) }
func (t sharedTx) WakeAllHosts()           { t.tx.AllHosts = true }

// sharedRow reports sql.ErrNoRows as sqlstore.ErrNoRows.
type sharedRow struct{ row *sql.Row }

func (r sharedRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return sqlstore.ErrNoRows
	}
	return err
}

type sharedRows struct{ *sql.Rows }

func (r sharedRows) Close() { _ = r.Rows.Close() }

// writer runs the shared store's writes through writeTx.
type writer struct{ s *Store }

func (w writer) Write(ctx context.Context, fenced bool, fn func(sqlstore.Tx) error) error {
	return w.s.writeTx(ctx, fenced, func(tx *txn) error { return fn(sharedTx{shared{tx}, tx}) })
}
