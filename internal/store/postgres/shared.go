package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/sqlstore"
)

// dialect is how PostgreSQL differs, for the shared store: servers on one
// database write concurrently, so a row read to be changed is locked; text
// sorts by the database's locale unless told byte order; terms are measured
// by the database's clock unless callerClockLeases.
func dialect(callerClockLeases bool) sqlstore.Dialect {
	return sqlstore.Dialect{
		LockRow:       " FOR UPDATE",
		ByteOrder:     ` COLLATE "C"`,
		Now:           dbNowMillis,
		DatabaseClock: !callerClockLeases,
		StorableText:  text,
	}
}

// sqlStore is the shared store, embedded under an unexported name so that
// this package's API stays its Store's methods.
type sqlStore = sqlstore.Store

// dbNowMillis is the database's clock in the stored form.
const dbNowMillis = `(extract(epoch FROM now()) * 1000)::bigint`

// pgxReader is what the pool (reader) and a transaction both offer.
type pgxReader interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// shared adapts the pool or a transaction to the shared store's Reader,
// classifying errors (classify).
type shared struct{ q pgxReader }

func (a shared) QueryRow(ctx context.Context, sql string, args ...any) sqlstore.Row {
	return sharedRow{a.q.QueryRow(ctx, sql, args...)}
}

func (a shared) Query(ctx context.Context, sql string, args ...any) (sqlstore.Rows, error) {
	rows, err := a.q.Query(ctx, sql, args...)
	if err != nil {
		return nil, classify(err)
	}
	return sharedRows{rows}, nil
}

// sharedExec adapts a transaction to the shared store's Execer.
type sharedExec struct {
	shared
	tx pgx.Tx
}

func (e sharedExec) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := e.tx.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

// sharedTx adapts a write transaction to the shared store's Tx.
type sharedTx struct {
	sharedExec
	txn *txn
}

func (t sharedTx) AppendEvent(ctx context.Context, e store.Event) (int64, error) {
	return t.txn.appendEvent(ctx, e)
}

// ExecEach sends the runs of the statement as one batch: one round trip.
func (t sharedTx) ExecEach(ctx context.Context, sql string, args [][]any) ([]int64, error) {
	var batch pgx.Batch
	for _, a := range args {
		batch.Queue(sql, a...)
	}
	results := t.tx.SendBatch(ctx, &batch)
	out := make([]int64, len(args))
	for i := range args {
		tag, err := results.Exec()
		if err != nil {
			results.Close()
			return nil, classify(err)
		}
		out[i] = tag.RowsAffected()
	}
	return out, classify(results.Close())
}

func (t sharedTx) WakeHosts(ids ...string) { t.txn.Hosts = append(t.txn.Hosts, ids...) }
func (t sharedTx) WakeAllHosts()           { t.txn.AllHosts = true }

// sharedRow reports pgx.ErrNoRows as sqlstore.ErrNoRows.
type sharedRow struct{ row pgx.Row }

func (r sharedRow) Scan(dest ...any) error {
	err := classify(r.row.Scan(dest...))
	if errors.Is(err, pgx.ErrNoRows) {
		return sqlstore.ErrNoRows
	}
	return err
}

// sharedRows classifies the errors of reading a result: a query's
// connection lost is seen here, not by Query, which sends lazily.
type sharedRows struct{ pgx.Rows }

func (r sharedRows) Scan(dest ...any) error { return classify(r.Rows.Scan(dest...)) }
func (r sharedRows) Err() error             { return classify(r.Rows.Err()) }

// writer runs the shared store's writes through writeTx.
type writer struct{ s *Store }

func (w writer) Write(ctx context.Context, fenced bool, fn func(sqlstore.Tx) error) error {
	return w.s.writeTx(ctx, fenced, func(tx *txn) error { return fn(sharedTx{sharedExec{shared{tx}, tx}, tx}) })
}
