// Package sqlstore holds the SQL and the methods the SQLite and PostgreSQL
// stores share, written once. A backend adapts its connection pool and its
// write transactions to the small interfaces below (Reader, Tx, Writer) and
// names its real differences in a Dialect; its Store embeds this one and
// keeps only what is its own: opening, migrations, write plumbing (begin,
// fence check, commit, wake-ups, retries), notifications, blobs, import and
// export. This Store is itself composed of one type per consumer's interface
// of package store (Leases, Members, Statuses...), each in its own file, so
// a reader of one consumer's SQL meets no other's.
//
// Every statement here runs unchanged on both databases: placeholders are
// $1..$n, casts are CAST(x AS type), and a read-modify-write either is one
// statement or locks the rows it reads (Dialect.LockRow). A Writer may run a
// transaction's function more than once (PostgreSQL retries deadlock
// victims), so each function here sets, never adds to, what it reports.
package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/store"
)

// The interfaces the shared store implements whole; a backend adds the
// desired states, the waits on events and what else is its own.
var (
	_ reconciler.ResourceStorage = (*Store)(nil)
	_ store.Liveness             = (*Store)(nil)
	_ store.Statuses             = (*Store)(nil)
	_ store.BlobRetention        = (*Store)(nil)
	_ store.ApplyHistory         = (*Store)(nil)
	_ store.Projects             = (*Store)(nil)
	_ store.AdminTokens          = (*Store)(nil)
	_ store.JoinTokens           = (*Store)(nil)
	_ store.Members              = (*Store)(nil)
	_ store.HostCapacities       = (*Store)(nil)
	_ store.Leases               = (*Store)(nil)
	_ store.Plans                = (*Store)(nil)
	_ store.SecretValues         = (*Store)(nil)
	_ store.ServerRegistry       = (*Store)(nil)
	_ store.Runs                 = (*Store)(nil)
	_ store.ScheduleStates       = (*Store)(nil)
	_ store.VolumeTasks          = (*Store)(nil)
	_ store.NotifyCursor         = (*Store)(nil)
	_ store.RegistryLogins       = (*Store)(nil)
)

// The shared store reads and writes desired states; a backend adds their
// waits (store.DesiredStates.WatchDesiredState), which its Tx wakes.
var _ interface {
	PutDesiredStates(ctx context.Context, states []store.DesiredState, peers *store.PeerList) (bool, error)
	DesiredState(ctx context.Context, hostID string) (store.DesiredState, error)
	AllDesiredStates(ctx context.Context) ([]store.DesiredState, error)
	DesiredPeers(ctx context.Context) (store.PeerList, error)
	DesiredPeersVersion(ctx context.Context) (string, error)
} = (*Store)(nil)

// ErrNoRows is what Row.Scan returns when a query found no row; adapters map
// their driver's own sentinel to it.
var ErrNoRows = errors.New("sqlstore: no rows in result set")

// Row is one row a query returned, or the error it failed with.
type Row interface {
	// Scan copies the row's columns into dest; ErrNoRows if there was none.
	Scan(dest ...any) error
}

// Rows is a query's result, read row by row. Close must be called.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// Reader runs queries: the pool outside any write, or a write transaction.
type Reader interface {
	QueryRow(ctx context.Context, sql string, args ...any) Row
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
}

// Execer runs queries and statements in a transaction.
type Execer interface {
	Reader
	// Exec runs a statement and returns how many rows it changed.
	Exec(ctx context.Context, sql string, args ...any) (int64, error)
}

// Tx is a write transaction.
type Tx interface {
	Execer
	// ExecEach runs a statement once for each list of arguments, in one
	// round trip where the database allows, and returns how many rows each
	// run changed: the desired states of an apply over 1,000 hosts.
	ExecEach(ctx context.Context, sql string, args [][]any) ([]int64, error)
	// WakeHosts wakes, once the transaction commits, the waiters of these
	// hosts' desired states; WakeAllHosts those of every host.
	WakeHosts(ids ...string)
	WakeAllHosts()
	// AppendEvent records an event and returns its Seq; an event without an
	// actor gets ctx's (store.WithActor). The event's waiters are woken once
	// the transaction commits. Call it after every other row the transaction
	// changes: it may lock the event counter until the commit.
	AppendEvent(ctx context.Context, e store.Event) (int64, error)
}

// Writer runs write transactions: it begins one, checks ctx's fences
// (store.WithFence) if fenced, runs fn, commits, and wakes the waiters of
// what fn changed. fn's error rolls everything back. fn may run more than
// once if the database aborted an attempt that may succeed when run again.
type Writer interface {
	Write(ctx context.Context, fenced bool, fn func(Tx) error) error
}

// Dialect names what differs between the databases, each by what it means.
type Dialect struct {
	// LockRow ends a SELECT of rows the transaction goes on to change, so
	// concurrent writers queue on them (" FOR UPDATE"); empty where writes
	// are serialised anyway.
	LockRow string
	// ByteOrder follows a text term of an ORDER BY so it sorts byte by byte,
	// as Go does, whatever the database's locale (` COLLATE "C"`); empty
	// where that is the default order.
	ByteOrder string
	// Now is the database's clock in the stored form (milliseconds since
	// the epoch), as SQL.
	Now string
	// DatabaseClock measures terms (leases, server registrations) by Now
	// instead of by the times their callers give, so servers whose clocks
	// differ agree on when one ended.
	DatabaseClock bool
	// StorableText makes free text storable (PostgreSQL's text refuses the
	// NUL character, which a message quoting a container's log may hold).
	StorableText func(string) string
}

// Store is the store logic the backends share, over their Reader and Writer.
// It holds no method of its own: it composes one type per consumer's
// interface (package store), each holding the methods that interface
// declares. A method two interfaces declare is held once: ListHosts by
// HostList (Liveness and Statuses embed store.HostList), ListHostIdentities
// by HostIdentities (Members embeds it), ListResources by Resources (the
// reconciler's, which store.Projects repeats).
type Store struct {
	Resources
	Projects
	HostList
	Liveness
	Statuses
	DesiredStates
	Events
	BlobRetention
	ApplyHistory
	AdminTokens
	JoinTokens
	HostIdentities
	Members
	ServerRegistry
	Leases
	Plans
	SecretValues
	HostCapacities
	Runs
	ScheduleStates
	VolumeTasks
	NotifyCursors
	RegistryLogins
}

// New returns the shared store over a backend's reads, writes and dialect.
func New(db Reader, w Writer, d Dialect) *Store {
	b := base{db: db, w: w, d: d}
	return &Store{
		Resources:      Resources{b},
		Projects:       Projects{b},
		HostList:       HostList{b},
		Liveness:       Liveness{b},
		Statuses:       Statuses{b},
		DesiredStates:  DesiredStates{b},
		Events:         Events{b},
		BlobRetention:  BlobRetention{b},
		ApplyHistory:   ApplyHistory{b},
		AdminTokens:    AdminTokens{b},
		JoinTokens:     JoinTokens{b},
		HostIdentities: HostIdentities{b},
		Members:        Members{b},
		ServerRegistry: ServerRegistry{b},
		Leases:         Leases{b},
		Plans:          Plans{b},
		SecretValues:   SecretValues{b},
		HostCapacities: HostCapacities{b},
		Runs:           Runs{b},
		ScheduleStates: ScheduleStates{b},
		VolumeTasks:    VolumeTasks{b},
		NotifyCursors:  NotifyCursors{b},
		RegistryLogins: RegistryLogins{b},
	}
}

// base is what each of Store's parts reads and writes through: the same
// backend for all, so they share its transactions' fences and wake-ups.
type base struct {
	db Reader // reads outside write transactions
	w  Writer
	d  Dialect
}

// write runs fn in a write transaction checked against ctx's fences.
func (b *base) write(ctx context.Context, fn func(Tx) error) error {
	return b.w.Write(ctx, true, fn)
}

// unfenced runs fn in a write transaction that ctx's fences do not guard:
// the lease operations themselves, and what no project owns.
func (b *base) unfenced(ctx context.Context, fn func(Tx) error) error {
	return b.w.Write(ctx, false, fn)
}

// termStart is the SQL of the time a term is measured from: the database's
// clock if the dialect measures terms by it, else the caller's time, bound
// at placeholder caller. Placeholder useDB must be bound to
// b.d.DatabaseClock (a statement's parameters are fixed, whichever clock
// it uses).
func (b *base) termStart(caller, useDB string) string {
	return `(CASE WHEN CAST(` + useDB + ` AS boolean) THEN ` + b.d.Now + ` ELSE CAST(` + caller + ` AS bigint) END)`
}

// Millis converts a time to the stored form; the zero time is 0.
func Millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// FromMillis converts the stored form back; 0 is the zero time.
func FromMillis(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// notFound maps ErrNoRows to store.ErrNotFound, naming what was missing.
func notFound(err error, what string) error {
	if errors.Is(err, ErrNoRows) {
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	return err
}

// collect reads every row of a result with scan, and closes it.
func collect[T any](rows Rows, scan func(Row) (T, error)) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// scanStrings reads a one-column result.
func scanStrings(rows Rows, what string) ([]string, error) {
	out, err := collect(rows, func(row Row) (v string, err error) { return v, row.Scan(&v) })
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// sortedUnique returns in sorted, each string once.
func sortedUnique(in []string) []string {
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}
