package postgres

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/reconciler/storagetest"
	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/storetest"
	"github.com/hatchery/hatchery/internal/testutil/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// openTemp opens a store on a new, empty database of the test cluster.
func openTemp(t *testing.T) *Store {
	t.Helper()
	c := pgtest.Shared(t)
	s, err := Open(t.Context(), c.NewSchema(t), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Store { return openTemp(t) })
}

// The lease contract reads with the caller's clock; servers use the
// database's (TestLeasesAreMeasuredByTheDatabaseClock).
func TestApplyProtocolConformance(t *testing.T) {
	storetest.RunApply(t, func(t *testing.T) storetest.ApplyStore { return openCallerClock(t) })
}

// The scheduler's fenced writes, with leases read as the lease contract's.
func TestRunFencing(t *testing.T) {
	storetest.RunRunFencing(t, func(t *testing.T) storetest.RunFencingStore { return openCallerClock(t) })
}

// openCallerClock is openTemp with leases measured by the callers' times.
func openCallerClock(t *testing.T) *Store {
	t.Helper()
	s, err := OpenWith(t.Context(), pgtest.Shared(t).NewSchema(t), zaptest.NewLogger(t), Options{CallerClockLeases: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Servers whose clocks are far apart agree on a lease: it is taken at the
// database's now() and expires by it, whatever Since each caller gives.
func TestLeasesAreMeasuredByTheDatabaseClock(t *testing.T) {
	s := openTemp(t)
	behind, ahead := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)
	lease := func(token string, since time.Time, term time.Duration) store.Lease {
		return store.Lease{Project: "default/shop", Token: token, Holder: "apply", Server: "srv-" + token, Since: since, Expires: since.Add(term)}
	}
	start := time.Now()
	held, err := s.AcquireLease(t.Context(), lease("a", behind, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if d := held.Since.Sub(start); d < -time.Minute || d > time.Minute {
		t.Fatalf("the lease was taken at %v, not at the database's now (%v)", held.Since, start)
	}
	if got := held.Expires.Sub(held.Since); got != time.Second {
		t.Fatalf("the lease lasts %v, want the 1s asked", got)
	}
	// A server whose clock is ten centuries ahead cannot take it over.
	if _, err := s.AcquireLease(t.Context(), lease("b", ahead, time.Minute)); !errors.Is(err, store.ErrLocked) {
		t.Fatalf("a server with its clock ahead took the lease: %v", err)
	}
	// A renewal counts its term from the database's now: it ends at most
	// the term after the call returned (the database runs on this
	// machine's clock), waited for rather than guessed.
	const renewed = 4 * time.Second
	if err := s.RenewLease(t.Context(), "default/shop", "a", time.Now().Add(renewed)); err != nil {
		t.Fatal(err)
	}
	renewedBy := time.Now()
	sleepUntil(held.Expires.Add(100 * time.Millisecond)) // past the first term, 3 s within the renewed one
	if _, err := s.AcquireLease(t.Context(), lease("b", ahead, time.Minute)); !errors.Is(err, store.ErrLocked) {
		t.Fatalf("the renewed lease was taken over within its term: %v", err)
	}
	sleepUntil(renewedBy.Add(renewed + 100*time.Millisecond)) // past the renewed term
	// Expired by the database's clock: one with its clock far behind takes it.
	if _, err := s.AcquireLease(t.Context(), lease("c", behind, time.Minute)); err != nil {
		t.Fatalf("a lease expired by the database's clock was not taken over: %v", err)
	}
}

// sleepUntil sleeps until the machine's clock reaches t: the instant a
// lease term ends, rather than a guess of how long the calls before took.
func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// The reconciler's own suite for its ResourceStorage, beside ours.
func TestReconcilerStorageSuite(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) reconciler.ResourceStorage { return openTemp(t) })
}

func TestReopenKeepsDataAndMigratesOnce(t *testing.T) {
	c := pgtest.Shared(t)
	url := c.URL(c.NewDatabase(t))
	s, err := Open(t.Context(), url, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutStatus(t.Context(), "h1", []byte(`{}`), time.UnixMilli(1000)); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s, err = Open(t.Context(), url, zaptest.NewLogger(t))
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
	if err := s.pool.QueryRow(t.Context(), `SELECT COUNT(*) FROM schema_migrations`).Scan(&applied); err != nil || applied != len(files) {
		t.Fatalf("schema_migrations has %d rows (%v), want one per migration file (%d)", applied, err, len(files))
	}
}

// Servers starting together on a fresh database migrate it once: without
// the advisory lock, the second CREATE TABLE fails or a migration runs twice.
func TestServersStartingTogetherMigrateOnce(t *testing.T) {
	c := pgtest.Shared(t)
	url := c.URL(c.NewDatabase(t))
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			s, err := Open(t.Context(), url, zaptest.NewLogger(t))
			if err == nil {
				s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
	}
}

func TestNewerSchemaIsRefused(t *testing.T) {
	c := pgtest.Shared(t)
	url := c.URL(c.NewDatabase(t))
	s, err := Open(t.Context(), url, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(t.Context(), `INSERT INTO schema_migrations (version, applied_at) VALUES (999, 0)`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err := Open(t.Context(), url, zaptest.NewLogger(t)); err == nil {
		s.Close()
		t.Fatal("a database from a newer binary was opened")
	} else if !strings.Contains(err.Error(), "newer") {
		t.Fatalf("error %q does not say the schema is newer", err)
	}
}

// A connection string's password never shows in an error.
func TestErrorsNeverRepeatThePassword(t *testing.T) {
	c := pgtest.Shared(t)
	for _, url := range []string{
		"postgres://hatch:s3cr3t-pw@127.0.0.1:1/x?sslmode=disable&connect_timeout=1", // nobody listens
		"postgres://hatch:s3cr3t-pw@127.0.0.1:%zz/x",                                 // not a URL
		strings.Replace(c.URL("postgres"), c.Password, "s3cr3t-pw", 1),               // wrong password
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		s, err := Open(ctx, url, zaptest.NewLogger(t))
		cancel()
		if err == nil {
			s.Close()
			t.Fatalf("opened %q", url)
		}
		if strings.Contains(err.Error(), "s3cr3t-pw") {
			t.Fatalf("the error repeats the password: %v", err)
		}
	}
}

func TestHasPassword(t *testing.T) {
	for url, want := range map[string]bool{
		"postgres://hatch@db:5432/hatch":                  false,
		"postgres://hatch:pw@db:5432/hatch":               true,
		"postgresql://hatch:@db/hatch":                    true,
		"postgres://db/hatch?user=hatch&password=pw":      true,
		"postgres://db/hatch?sslmode=verify-full&user=hk": false,
	} {
		got, err := HasPassword(url)
		if err != nil || got != want {
			t.Errorf("HasPassword(%q) = %v, %v; want %v", url, got, err, want)
		}
	}
	if _, err := HasPassword("postgres://hatch:pw@db:%zz/x"); err == nil || strings.Contains(err.Error(), "pw@") {
		t.Errorf("HasPassword of a bad URL: %v", err)
	}
}

// A follower of the event log (the SSE stream, `hatch events`) reads "seq >
// the last it saw": it must never skip an event that another transaction
// committed late with a smaller seq. Concurrent writers, one follower.
func TestEventFollowerMissesNothingUnderConcurrentWriters(t *testing.T) {
	s := openTemp(t)
	const writers, each = 4, 40
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if _, err := s.AppendEvent(t.Context(), store.Event{Time: time.UnixMilli(int64(1 + i)),
					Type: store.EventRolloutProgressing, Host: fmt.Sprint("h", w), Message: fmt.Sprint(i)}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	seen := map[int64]bool{}
	var last int64
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true // one more read after the last commit
		default:
		}
		evs, err := s.ListEvents(t.Context(), last, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			seen[e.Seq] = true
			last = e.Seq
		}
	}
	all, err := s.ListEvents(t.Context(), 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != writers*each {
		t.Fatalf("%d events stored, want %d", len(all), writers*each)
	}
	for _, e := range all {
		if !seen[e.Seq] {
			t.Fatalf("the follower skipped event %d (committed after a later one was read)", e.Seq)
		}
	}
}

// A database a server of the first schema made, with admin token, events
// and applies in it, is migrated at Open to named admin tokens and actors:
// its rows read back with no actor and the token not revoked, and the new
// contract works on it (a second token, refused if its hash is taken).
func TestSchemaOneUpgradesToNamedAdminTokens(t *testing.T) {
	c := pgtest.Shared(t)
	url := c.URL(c.NewDatabase(t))
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	first, err := migrations.ReadFile("migrations/0001_init.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{string(first),
		`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)`,
		`INSERT INTO schema_migrations VALUES (1, 0)`,
		`INSERT INTO tokens (name, hash, created_at) VALUES ('admin', 'admin-hash', 1000)`,
		`INSERT INTO events (seq, at, type, project, host, resource, message) VALUES (1, 1000, 'apply.started', 'default/shop', '', '', 'old')`,
		`UPDATE event_counter SET seq = 1`,
		`INSERT INTO applies (project, started_at, finished_at, outcome, message) VALUES ('default/shop', 1000, 0, 'running', '')`,
	} {
		if _, err := conn.Exec(t.Context(), q); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}

	s, err := Open(t.Context(), url, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("open a database of schema 1: %v", err)
	}
	defer s.Close()
	tokens, err := s.ListAdminTokens(t.Context())
	want := []store.AdminToken{{Name: "admin", Kind: store.TokenAdmin, Hash: "admin-hash", CreatedAt: time.UnixMilli(1000).UTC()}}
	if err != nil || len(tokens) != 1 || tokens[0] != want[0] {
		t.Fatalf("admin tokens after the upgrade = %+v, %v; want %+v", tokens, err, want)
	}
	evs, err := s.ListEvents(t.Context(), 0, 10)
	if err != nil || len(evs) != 1 || evs[0].Actor != "" || evs[0].Message != "old" {
		t.Fatalf("events after the upgrade = %+v, %v; want the old one, no actor", evs, err)
	}
	as, err := s.Applies(t.Context(), "default/shop")
	if err != nil || len(as) != 1 || as[0].Actor != "" || as[0].Outcome != store.ApplyRunning {
		t.Fatalf("applies after the upgrade = %+v, %v; want the old one, no actor", as, err)
	}
	if err := s.CreateAdminToken(t.Context(), store.AdminToken{Name: "alice", Hash: "admin-hash", CreatedAt: time.UnixMilli(2000)}, "admin"); !errors.Is(err, store.ErrExists) {
		t.Fatalf("a token with the first one's hash: %v, want ErrExists", err)
	}
	if err := s.CreateAdminToken(t.Context(), store.AdminToken{Name: "alice", Hash: "alice-hash", CreatedAt: time.UnixMilli(2000)}, "admin"); err != nil {
		t.Fatal(err)
	}
	if tok, err := s.AdminTokenByHash(t.Context(), "alice-hash"); err != nil || tok.Name != "alice" || tok.Revoked() {
		t.Fatalf("AdminTokenByHash = %+v, %v; want alice, not revoked", tok, err)
	}
}

// A fence checks its lease's expiry by the database's now(), whatever the
// clock of the server writing: a write under a lease past its term is
// refused though nobody took it over, and one within it lands even from a
// server whose clock is centuries ahead.
func TestFencesExpireByTheDatabaseClock(t *testing.T) {
	s := openTemp(t)
	ahead := time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := s.AcquireLease(t.Context(), store.Lease{Project: "default/shop", Token: "a", Holder: "apply", Server: "srv-a",
		Since: ahead, Expires: ahead.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	fenced := store.WithFence(t.Context(), store.Fence{Project: "default/shop", Token: "a"})
	put := func(fp string) error {
		return s.PutSecretValue(fenced, store.SecretValue{Project: "default/shop", Name: "k", Fingerprint: fp, Sealed: "x", Created: time.Now()})
	}
	if err := put("1"); err != nil {
		t.Fatalf("a write within the lease's term by the database's clock: %v", err)
	}
	time.Sleep(1500 * time.Millisecond)
	if err := put("2"); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("a write past the lease's term by the database's clock: %v, want ErrFenced", err)
	}
}

func TestIsURLMatchesTheSchemeWhateverItsCase(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u@db/x":      "postgres://u@db/x",
		"POSTGRESQL://u:pw@db/x": "postgresql://u:pw@db/x",
		"PostGres://u@DB/X":      "postgres://u@DB/X",
		"host=db password=pw":    "",
		"postgres:/u@db/x":       "",
		"mysql://u@db/x":         "",
		"postgresqlx://u@db/x":   "",
		"POSTGRES":               "",
	} {
		if got := IsURL(in); got != (want != "") {
			t.Errorf("IsURL(%q) = %v, want %v", in, got, want != "")
		}
		if want != "" && CanonicalURL(in) != want {
			t.Errorf("CanonicalURL(%q) = %q, want %q", in, CanonicalURL(in), want)
		}
	}
}
