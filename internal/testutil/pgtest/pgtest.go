// Package pgtest runs throwaway PostgreSQL clusters for tests: never the
// system's cluster on 5432, but one of the test binary's own in a temporary
// directory, listening on 127.0.0.1 at a free port and on a socket in that
// directory, stopped and removed when the tests end.
//
// PostgreSQL refuses to run as root, so as root the cluster's directory is
// given to the postgres user and initdb and pg_ctl run through
// `runuser -u postgres`. The binaries are found under
// /usr/lib/postgresql/*/bin (Debian's layout), else on PATH. Without them a
// test is skipped, except under CI=true, where it fails: CI installs them.
//
// A cluster whose test binary was killed is swept by the next one: each
// cluster's directory holds a lock file its test binary keeps locked.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
)

// StateDir holds one directory per cluster, named hatch-pg-<random>.
var StateDir = filepath.Join(os.TempDir(), "hatch-pgtest")

// User is the cluster's superuser; it logs in over TCP with a password and
// over the socket without one.
const User = "hatch"

// Cluster is one running PostgreSQL server.
type Cluster struct {
	Dir      string // the cluster's directory: data/, the socket, the password file
	Port     int
	Password string
	bin      string       // the directory of initdb, pg_ctl and postgres
	lock     *os.File     // locked while this process uses the cluster
	dbs      atomic.Int64 // names databases and schemas apart

	schemaDB  sync.Once // creates the database NewSchema's schemas live in
	schemaErr error
}

var (
	sharedMu sync.Mutex // guards shared
	shared   *Cluster
)

// Main runs a package's tests and then stops the cluster Shared started, if
// any: call it from TestMain as os.Exit(pgtest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared != nil {
		if err := shared.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
		shared = nil
	}
	return code
}

// Shared returns the test binary's cluster, started at the first call; Main
// stops it. Without PostgreSQL binaries the test is skipped (failed under CI).
func Shared(t testing.TB) *Cluster {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil {
		c, err := Start()
		if errors.Is(err, ErrNoBinaries) && os.Getenv("CI") != "true" {
			t.Skipf("pgtest: %v (CI=true makes this a failure)", err)
		}
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		shared = c
	}
	return shared
}

// ErrNoBinaries is returned when no PostgreSQL installation is found.
var ErrNoBinaries = errors.New("pgtest: no PostgreSQL binaries (initdb, pg_ctl) under /usr/lib/postgresql/*/bin or on PATH: apt-get install postgresql")

// binDir finds the newest installed PostgreSQL's binaries.
func binDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", ErrNoBinaries
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// Start makes and starts a new cluster; Stop removes it.
func Start() (*Cluster, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	if err := Sweep(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	dir, err := os.MkdirTemp(StateDir, "hatch-pg-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	c := &Cluster{Dir: dir, Password: randomHex(16), bin: bin}
	if c.lock, err = lockFile(filepath.Join(dir, "lock"), true); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := c.init(); err != nil {
		c.Stop()
		return nil, err
	}
	// A free port may be taken between our check and the server's bind:
	// try a few.
	for attempt := 0; ; attempt++ {
		if c.Port, err = freePort(); err == nil {
			if err = c.pgctl("start", "-w", "-t", "60", "-l", filepath.Join(dir, "server.log"), "-o", c.serverOptions()); err == nil {
				break
			}
		}
		if attempt == 3 {
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			c.Stop()
			return nil, fmt.Errorf("pgtest: start: %w\n%s", err, log)
		}
	}
	return c, nil
}

// init runs initdb: password logins over TCP, trusted ones over the socket
// in the cluster's own directory.
func (c *Cluster) init() error {
	if err := os.Chmod(c.Dir, 0o700); err != nil {
		return err
	}
	pwFile := filepath.Join(c.Dir, "pwfile")
	if err := os.WriteFile(pwFile, []byte(c.Password+"\n"), 0o600); err != nil {
		return err
	}
	if err := c.chownToPostgres(c.Dir, pwFile); err != nil {
		return err
	}
	err := c.run("initdb", "-D", filepath.Join(c.Dir, "data"), "-U", User, "--pwfile", pwFile,
		"--auth-local=trust", "--auth-host=scram-sha-256", "-N", "-E", "UTF8", "--locale=C")
	os.Remove(pwFile)
	return err
}

// serverOptions: loopback and the cluster's own socket only; durability is
// traded for speed (fsync off), which a test killing processes does not see.
func (c *Cluster) serverOptions() string {
	return fmt.Sprintf("-k %s -c listen_addresses=127.0.0.1 -p %d -c fsync=off -c full_page_writes=off -c max_connections=300",
		c.Dir, c.Port)
}

// Stop stops the server and removes its directory.
func (c *Cluster) Stop() error {
	var err error
	if _, statErr := os.Stat(filepath.Join(c.Dir, "data", "postmaster.pid")); statErr == nil {
		err = c.pgctl("stop", "-m", "immediate", "-w")
	}
	if c.lock != nil {
		c.lock.Close()
	}
	return errors.Join(err, os.RemoveAll(c.Dir))
}

// Kill stops the server at once, as kill -9 would leave the clients (for
// tests of a database that goes away); Restart brings it back.
func (c *Cluster) Kill() error { return c.pgctl("stop", "-m", "immediate", "-w") }

// Restart starts a killed server again, on the same port.
func (c *Cluster) Restart() error {
	return c.pgctl("start", "-w", "-t", "60", "-l", filepath.Join(c.Dir, "server.log"), "-o", c.serverOptions())
}

// URL returns the TCP connection URL of database db, with the password.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/%s?sslmode=disable", User, c.Password, c.Port, db)
}

// URLWithoutPassword returns the TCP connection URL of database db for a
// client given the password another way (PGPASSFILE).
func (c *Cluster) URLWithoutPassword(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", User, c.Port, db)
}

// PassFile writes a password file (the .pgpass format) for this cluster at
// path, mode 0600 as libpq and pgx require.
func (c *Cluster) PassFile(path string) error {
	return os.WriteFile(path, fmt.Appendf(nil, "127.0.0.1:%d:*:%s:%s\n", c.Port, User, c.Password), 0o600)
}

// NewDatabase creates an empty database for one test, dropped when the test
// ends, and returns its name.
func (c *Cluster) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%s", c.dbs.Add(1), randomHex(4))
	if err := c.Admin(t.Context(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Admin(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return name
}

// NewSchema makes an empty schema for one test, in the cluster's database
// "hatch", dropped when the test ends, and returns the TCP connection URL
// (with the password) whose connections use it: as good as an empty
// database to a store, and many times cheaper to make than one.
func (c *Cluster) NewSchema(t testing.TB) string {
	t.Helper()
	c.schemaDB.Do(func() { c.schemaErr = c.Admin(context.Background(), "CREATE DATABASE hatch") })
	if c.schemaErr != nil {
		t.Fatalf("pgtest: create database hatch: %v", c.schemaErr)
	}
	name := fmt.Sprintf("t%d_%s", c.dbs.Add(1), randomHex(4))
	if err := c.exec(t.Context(), "hatch", "CREATE SCHEMA "+name); err != nil {
		t.Fatalf("pgtest: create schema: %v", err)
	}
	t.Cleanup(func() {
		if err := c.exec(context.Background(), "hatch", "DROP SCHEMA "+name+" CASCADE"); err != nil {
			t.Errorf("pgtest: drop schema %s: %v", name, err)
		}
	})
	return c.URL("hatch") + "&search_path=" + name
}

// Admin runs one statement as the superuser, over the socket.
func (c *Cluster) Admin(ctx context.Context, sql string, args ...any) error {
	return c.exec(ctx, "postgres", sql, args...)
}

// exec runs one statement as the superuser in database db, over the socket.
func (c *Cluster) exec(ctx context.Context, db, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", c.Dir, c.Port, User, db))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// pgctl runs pg_ctl on the cluster's data directory.
func (c *Cluster) pgctl(args ...string) error {
	return c.run("pg_ctl", append([]string{"-D", filepath.Join(c.Dir, "data")}, args...)...)
}

// run runs one of the PostgreSQL binaries, as the postgres user when we are root.
func (c *Cluster) run(name string, args ...string) error {
	path := filepath.Join(c.bin, name)
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	cmd.Dir = c.Dir
	// The server must not die with the test's process group on Ctrl-C
	// before Stop runs; Sweep catches the rest.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// chownToPostgres gives paths to the postgres user when we are root.
func (c *Cluster) chownToPostgres(paths ...string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("pgtest: running as root needs the postgres user (apt-get install postgresql): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, p := range paths {
		if err := os.Chown(p, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

// Sweep stops and removes the clusters of test binaries that are gone (their
// lock file is no longer locked).
func Sweep() error {
	entries, err := os.ReadDir(StateDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pgtest sweep: %w", err)
	}
	bin, _ := binDir()
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "hatch-pg-") {
			continue
		}
		dir := filepath.Join(StateDir, e.Name())
		lock, err := lockFile(filepath.Join(dir, "lock"), false)
		if errors.Is(err, errLocked) {
			continue // alive
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		old := &Cluster{Dir: dir, bin: bin}
		if lock != nil {
			old.lock = lock
		}
		if bin != "" {
			errs = append(errs, old.Stop())
		} else {
			errs = append(errs, os.RemoveAll(dir))
		}
	}
	return errors.Join(errs...)
}

var errLocked = errors.New("locked")

// lockFile opens (creating if asked) and locks path without waiting.
func lockFile(path string, create bool) (*os.File, error) {
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errLocked
		}
		return nil, err
	}
	return f, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
