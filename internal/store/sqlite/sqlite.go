// Package sqlite is the control plane's embedded store: one SQLite file
// (modernc.org/sqlite, no cgo) in WAL mode with full fsync, so that every
// acknowledged write survives a crash of the process or of the machine.
//
// Write transactions of this process are serialised by a mutex, so they queue
// in Go instead of sleeping in SQLite's busy handler; busy_timeout still covers
// another process (a backup, the sqlite3 shell) holding the lock. Reads run
// concurrently beside them, as WAL allows. The schema is migrated at Open, in
// one transaction, from the SQL files embedded in the binary.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/sqlstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Store is the SQLite implementation of the store interfaces. What it
// shares with the PostgreSQL store is sqlstore's, over this file's write
// transactions (see shared.go).
type Store struct {
	*sqlStore

	db  *sql.DB
	log *zap.Logger

	writeMu sync.Mutex // serialises write transactions (see the package doc)

	sqlstore.Waiters
}

// The store interfaces this store implements with its own methods; it
// implements the others with the shared store's (sqlstore).
var (
	_ store.DesiredStates = (*Store)(nil)
	_ store.Events        = (*Store)(nil)
)

// Open opens (creating if needed) the database file at path and migrates it.
func Open(ctx context.Context, path string, log *zap.Logger) (*Store, error) {
	if log == nil {
		return nil, errors.New("sqlite: no logger")
	}
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("sqlite path %q: must not contain ? or #", path)
	}
	if err := ownerOnly(path); err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	dsn := path + "?_txlock=immediate" +
		"&_pragma=busy_timeout(10000)" +
		"&_pragma=journal_mode(WAL)" +
		"&_pragma=synchronous(FULL)" +
		"&_pragma=foreign_keys(1)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// Enough connections for concurrent readers beside the one writer,
	// without one connection (and page cache) per waiting request.
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(4)
	s := &Store{db: db, log: log.With(zap.String("store", path))}
	s.sqlStore = sqlstore.New(shared{db}, writer{s}, dialect)
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("migrate %s: %w", path, err)
	}
	return s, nil
}

// ownerOnly makes the database file, and the files SQLite keeps beside it,
// readable by their owner only (0600): they hold token hashes and sealed
// secrets. A missing database file is made empty first (SQLite takes an empty
// file for a new database), since SQLite makes it 0644 and gives the -wal and
// -shm files the database file's mode. Files an older version left open are
// tightened.
func ownerOnly(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	for _, p := range []string{path, path + "-wal", path + "-shm", path + "-journal"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// Close closes the database. Writes in flight finish first.
func (s *Store) Close() error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	return s.db.Close()
}

// migrate applies, in one write transaction, every embedded migration newer
// than the database's schema version (sqlstore.Migrate).
func (s *Store) migrate(ctx context.Context) error {
	return s.write(ctx, func(tx *txn) error { return sqlstore.Migrate(ctx, shared{tx}, migrations, s.log) })
}

// txn is a write transaction that also collects who to wake once it commits.
type txn struct {
	*sql.Tx
	sqlstore.Changes // woken once committed
}

// write runs fn in a write transaction and, once it committed, wakes the
// waiters of what it changed. fn's error rolls everything back.
func (s *Store) write(ctx context.Context, fn func(tx *txn) error) error {
	return s.writeTx(ctx, true, fn)
}

// writeTx is write, with the check of ctx's fences (store.WithFence) or
// without it (the lease operations): each fence's lease must be held with its
// token and not expired by this process's clock, the one clock of the one
// server a SQLite file has. Writes are serialised, so the check and the
// write see the same leases.
func (s *Store) writeTx(ctx context.Context, fenced bool, fn func(tx *txn) error) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	sqlTx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	tx := &txn{Tx: sqlTx}
	if fenced {
		for _, fence := range store.Fences(ctx) {
			var one int
			err := sqlTx.QueryRowContext(ctx, `SELECT 1 FROM leases WHERE project = $1 AND token = $2 AND expires_at > $3`,
				fence.Project, fence.Token, sqlstore.Millis(time.Now())).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				err = fmt.Errorf("lease %s: %w", fence.Project, store.ErrFenced)
			}
			if err != nil {
				_ = sqlTx.Rollback()
				return err
			}
		}
	}
	if err := fn(tx); err != nil {
		_ = sqlTx.Rollback()
		return err
	}
	if err := sqlTx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	s.Wake(tx.Changes)
	return nil
}

// appendEvent records an event inside tx and returns its Seq; an event
// without an actor gets ctx's (store.WithActor).
func (tx *txn) appendEvent(ctx context.Context, e store.Event) (int64, error) {
	if e.Actor == "" {
		e.Actor = store.ActorOf(ctx)
	}
	var seq int64
	err := tx.QueryRowContext(ctx, `INSERT INTO events (at, type, project, host, resource, message, actor)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING seq`,
		sqlstore.Millis(e.Time), string(e.Type), e.Project, e.Host, e.Resource, e.Message, e.Actor).Scan(&seq)
	if err != nil {
		return 0, fmt.Errorf("append %s event: %w", e.Type, err)
	}
	tx.Events = true
	return seq, nil
}
