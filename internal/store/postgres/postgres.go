// Package postgres is the control plane's store on PostgreSQL
// (github.com/jackc/pgx/v5), for servers that run on a database the operator
// already keeps and backs up. It implements every interface the SQLite store
// does and passes the same conformance suites.
//
// Transactions run at READ COMMITTED, and every read-modify-write either is
// one statement (an upsert with a condition, an UPDATE ... WHERE) or locks
// the rows it reads (SELECT ... FOR UPDATE), so concurrent writers queue on
// row locks instead of aborting. A transaction that records an event takes
// the one event counter row last: events commit in the order of their
// sequence numbers, and rows are always locked before the counter, so the
// lock order has no cycle. A deadlock or serialisation failure reported by
// the database all the same is retried.
//
// The schema is migrated at Open, in one transaction holding an advisory
// lock, so servers starting together migrate once.
//
// The connection string may carry a password, so it never appears in an error
// or a log line; pgx also reads the password from PGPASSFILE (or ~/.pgpass).
package postgres

import (
	"cmp"
	"context"
	cryptorand "crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/sqlstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// migrationLock is the advisory lock key held while migrating ("hatchmig").
const migrationLock int64 = 0x68617463686d6967

// Store is the PostgreSQL implementation of the store interfaces. What it
// shares with the SQLite store is sqlstore's, over this file's write
// transactions (see shared.go).
type Store struct {
	*sqlStore

	pool *pgxpool.Pool
	db   reader // the pool, for reads: their errors classified
	log  *zap.Logger

	sqlstore.Waiters

	// nonce tells this store's notifications from other servers' (see listen.go).
	nonce         string
	stopListening context.CancelFunc
	listenDone    chan struct{} // closed when the listening goroutine ended
}

// The store interfaces this store implements with its own methods; it
// implements the others with the shared store's (sqlstore).
var (
	_ store.DesiredStates = (*Store)(nil)
	_ store.Events        = (*Store)(nil)
)

// urlSchemes are the schemes of a PostgreSQL connection URL, lower case.
var urlSchemes = []string{"postgres://", "postgresql://"}

// IsURL reports whether s is a PostgreSQL connection URL. The scheme is
// matched whatever its case (URL schemes are case-insensitive), so
// POSTGRESQL://... is read as the URL it is, its password checked, rather than
// refused as an unknown store.
func IsURL(s string) bool {
	for _, scheme := range urlSchemes {
		if len(s) >= len(scheme) && strings.EqualFold(s[:len(scheme)], scheme) {
			return true
		}
	}
	return false
}

// CanonicalURL returns the PostgreSQL URL s with its scheme in lower case,
// the only case pgx reads as a URL (it would take POSTGRES://... for a
// key=value string). s is returned as is when it is not a PostgreSQL URL.
func CanonicalURL(s string) string {
	for _, scheme := range urlSchemes {
		if len(s) >= len(scheme) && strings.EqualFold(s[:len(scheme)], scheme) {
			return scheme + s[len(scheme):]
		}
	}
	return s
}

// errBadURL refuses a connection string pgx cannot parse, without repeating it.
var errBadURL = errors.New("the PostgreSQL connection string is not valid: want postgres://user@host:port/database, options after ?")

// parseConfig parses a connection string. Its error never repeats the string.
func parseConfig(connString string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, errBadURL
	}
	return cfg, nil
}

// HasPassword reports whether the connection URL itself holds a password,
// in its user info or as a password parameter (one from PGPASSWORD or a
// password file does not count). Its error never repeats the URL.
func HasPassword(rawURL string) (bool, error) {
	u, err := url.Parse(rawURL)
	if err != nil || !IsURL(rawURL) {
		return false, errBadURL
	}
	if _, ok := u.User.Password(); ok {
		return true, nil
	}
	for k := range u.Query() {
		if strings.EqualFold(k, "password") {
			return true, nil
		}
	}
	return false, nil
}

// Options change how a store behaves; the zero value is what servers use.
type Options struct {
	// CallerClockLeases measures a lease by the Since and Expires its
	// caller gives, as the store.Leases contract reads with one clock. By
	// default the database's clock measures them: a lease is taken at the
	// database's now() for Expires - Since, and renewed for as long from its
	// now(), so servers whose clocks differ agree on when a lease expired.
	CallerClockLeases bool
	// IdleInTransaction ends this store's sessions that sit in a transaction
	// without a statement for longer (PostgreSQL's
	// idle_in_transaction_session_timeout), so a server paused mid-write
	// (SIGSTOP, a long GC) does not hold its row locks, and so every other
	// server's writes to those rows, for as long as it is paused. Zero:
	// DefaultIdleInTransaction.
	IdleInTransaction time.Duration
}

// DefaultIdleInTransaction is Options.IdleInTransaction's default: far
// above any pause of the store's own transactions, which never wait on
// anything but the database between statements, and under the server's
// 30 s request deadline, so a write queued behind a paused server's locks
// is still answered.
const DefaultIdleInTransaction = 15 * time.Second

// Open connects to the database the connection string names, and migrates it.
func Open(ctx context.Context, connString string, log *zap.Logger) (*Store, error) {
	return OpenWith(ctx, connString, log, Options{})
}

// OpenWith is Open with options.
func OpenWith(ctx context.Context, connString string, log *zap.Logger, opts Options) (*Store, error) {
	if log == nil {
		return nil, errors.New("postgres: no logger")
	}
	cfg, err := parseConfig(connString)
	if err != nil {
		return nil, err
	}
	idle := cmp.Or(opts.IdleInTransaction, DefaultIdleInTransaction)
	cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(idle.Milliseconds(), 10)
	// The database's own name and host, for logs: never the user or password.
	where := fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres %s: %w", where, err)
	}
	s := &Store{pool: pool, db: reader{pool}, log: log.With(zap.String("store", "postgres://"+where)), nonce: newNonce()}
	s.sqlStore = sqlstore.New(shared{s.db}, writer{s}, dialect(opts.CallerClockLeases))
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("migrate postgres %s: %w", where, err)
	}
	if err := s.startListening(ctx, cfg.ConnConfig); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres %s: %w", where, err)
	}
	s.log.Info("store opened")
	return s, nil
}

// Close stops listening and closes every connection, once those in use are
// returned.
func (s *Store) Close() error {
	s.stopListening()
	<-s.listenDone
	s.pool.Close()
	return nil
}

// newNonce names one store instance in its notifications.
func newNonce() string {
	b := make([]byte, 8)
	_, _ = cryptorand.Read(b)
	return hex.EncodeToString(b)
}

// migrate applies, in one transaction under an advisory lock, every embedded
// migration newer than the database's schema version (sqlstore.Migrate).
func (s *Store) migrate(ctx context.Context) error {
	// READ COMMITTED: each statement after the lock sees what a server that
	// migrated before us committed.
	return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		return sqlstore.Migrate(ctx, sharedExec{shared{tx}, tx}, migrations, s.log)
	})
}

// checkFence fails with store.ErrFenced unless the fence's lease is held
// with its token and unexpired by the database's now() (whichever clock
// measured it when it was taken), sharing the row's lock until the commit.
func checkFence(ctx context.Context, t pgx.Tx, fence store.Fence) error {
	var one int
	err := t.QueryRow(ctx, `SELECT 1 FROM leases WHERE project = $1 AND token = $2 AND expires_at > `+dbNowMillis+` FOR SHARE`,
		fence.Project, fence.Token).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("lease %s: %w", fence.Project, store.ErrFenced)
	}
	return err
}

// txn is a write transaction that also collects who to wake once it commits.
type txn struct {
	pgx.Tx
	sqlstore.Changes // woken once committed
}

// maxAttempts bounds the retries of a transaction the database aborted to
// break a deadlock or a serialisation conflict.
const maxAttempts = 8

// writeTx runs fn in a transaction and, once it committed, wakes the
// waiters of what it changed; fn's error rolls everything back. A
// transaction the database aborted as a deadlock victim is run again from
// the start, so fn must set (not add to) whatever it reports to its caller.
// With fenced, ctx's fences (store.WithFence) are checked (not for the
// lease operations): each fence's lease must be held with its token and not
// expired by the database's clock; the check shares the lease row's lock
// until the commit: a takeover waits for the write, or the write sees it.
func (s *Store) writeTx(ctx context.Context, fenced bool, fn func(tx *txn) error) error {
	var fences []store.Fence
	if fenced {
		fences = store.Fences(ctx)
	}
	for attempt := 1; ; attempt++ {
		tx := &txn{}
		err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(t pgx.Tx) error {
			tx.Tx = t
			for _, fence := range fences {
				if err := checkFence(ctx, t, fence); err != nil {
					return err
				}
			}
			if err := fn(tx); err != nil {
				return err
			}
			return s.sendNotifications(ctx, tx)
		})
		if err == nil {
			s.Wake(tx.Changes)
			return nil
		}
		if !retryable(err) || attempt == maxAttempts {
			return classify(err)
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(time.Duration(rand.Int64N(int64(attempt) * int64(5*time.Millisecond)))):
		}
	}
}

// retryable reports whether the database aborted a transaction that may
// succeed when run again: a deadlock victim or a serialisation failure.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001")
}

// appendEvent records an event inside tx and returns its Seq. It takes the
// event counter's row lock, held until tx ends: call it after every other
// row tx locks. An event without an actor gets ctx's (store.WithActor).
func (tx *txn) appendEvent(ctx context.Context, e store.Event) (int64, error) {
	if e.Actor == "" {
		e.Actor = store.ActorOf(ctx)
	}
	var seq int64
	err := tx.QueryRow(ctx, `UPDATE event_counter SET seq = seq + 1 RETURNING seq`).Scan(&seq)
	if err != nil {
		return 0, fmt.Errorf("append %s event: %w", e.Type, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO events (seq, at, type, project, host, resource, message, actor)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		seq, sqlstore.Millis(e.Time), string(e.Type), e.Project, e.Host, e.Resource, text(e.Message), e.Actor); err != nil {
		return 0, fmt.Errorf("append %s event: %w", e.Type, err)
	}
	tx.Events = true
	return seq, nil
}

// text makes free text storable: PostgreSQL's text refuses the NUL character,
// which a message quoting a container's log line may hold.
func text(s string) string { return strings.ReplaceAll(s, "\x00", "\uFFFD") }
