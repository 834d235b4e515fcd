package dockertest

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
)

// Scope is one test's share of the engine: a client, labels to put on every
// object the test (or the code under test) creates, and the removal of those
// objects when the test ends.
type Scope struct {
	Client *client.Client
	// ID is unique per scope within the run; Name uses it.
	ID string
	t  testing.TB
}

// NewScope connects to the engine, failing the test if there is none (a
// docker-tagged test must not pass without one), and registers the removal
// of every container, network and volume labelled with the scope, and of its
// shared-memory directory.
func NewScope(t testing.TB) *Scope {
	t.Helper()
	cli, err := NewClient(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	s := &Scope{Client: cli, ID: "s" + randomHex(3), t: t}
	t.Cleanup(func() {
		// t.Context() is already cancelled when cleanups run.
		err := Sweep(context.Background(), cli,
			filters.Arg("label", RunLabel+"="+RunID()),
			filters.Arg("label", ScopeLabel+"="+s.ID))
		if err != nil {
			t.Errorf("dockertest: clean up scope %s: %v", s.ID, err)
		}
		if err := os.RemoveAll(s.shmDir()); err != nil {
			t.Errorf("dockertest: remove %s: %v", s.shmDir(), err)
		}
		cli.Close()
	})
	return s
}

// Labels returns the run and scope labels, merged with extra (a fresh map
// each call, so the caller may add to it).
func (s *Scope) Labels(extra map[string]string) map[string]string {
	l := map[string]string{RunLabel: RunID(), ScopeLabel: s.ID}
	maps.Copy(l, extra)
	return l
}

// Name returns a name unique to the run and scope, for objects the test
// names itself: "hatchtest-<run>-<scope>-<parts joined by ->".
func (s *Scope) Name(parts ...string) string {
	return strings.Join(append([]string{"hatchtest", RunID(), s.ID}, parts...), "-")
}

// ShmDir returns a fresh directory on /dev/shm (a tmpfs, like the agent's
// secret directory in production), removed when the test ends.
func (s *Scope) ShmDir() string {
	s.t.Helper()
	if err := os.MkdirAll(s.shmDir(), 0o700); err != nil {
		s.t.Fatal(err)
	}
	dir, err := os.MkdirTemp(s.shmDir(), "")
	if err != nil {
		s.t.Fatal(err)
	}
	return dir
}

func (s *Scope) shmDir() string {
	return filepath.Join("/dev/shm", "hatchtest-"+RunID()+"-"+s.ID)
}
