package acme

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/seal"
)

// slowHosts is a fleet where one host reports the challenge loaded only
// after a number of polls: what the manager must wait for before it tells
// the CA to validate.
type slowHosts struct {
	hosts
	mu      sync.Mutex // guards polls and pending
	polls   int
	pending int // polls still answered "h2 waiting"; < 0: forever
}

func (s *slowHosts) ChallengeWaiting(context.Context, string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.polls++
	if s.pending == 0 {
		return nil, nil
	}
	if s.pending > 0 {
		s.pending--
	}
	return []string{"h2"}, nil
}

func (s *slowHosts) pollCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.polls
}

func newWaitingManager(t *testing.T, certs Certificates, loadedWait time.Duration) *Manager {
	t.Helper()
	box, _ := seal.New(bytes.Repeat([]byte{9}, 32))
	m, err := New(Config{DirectoryURL: "https://ca.invalid/dir", Email: "ops@hatch.test",
		AccountKeyFile: filepath.Join(t.TempDir(), "account.key"), Box: box, Certificates: certs, Events: &events{},
		Logger: zaptest.NewLogger(t), LoadedWait: loadedWait})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// The CA is told to validate only once every live host reports the token
// loaded: a host that loads it at the fourth poll holds the order until
// then.
func TestTheManagerWaitsForEveryHostToLoadTheChallenge(t *testing.T) {
	h := &slowHosts{hosts: hosts{names: map[string]*contract.Certificate{}}, pending: 3}
	m := newWaitingManager(t, h, time.Minute)
	if err := m.waitLoaded(t.Context(), "tok"); err != nil {
		t.Fatalf("wait: %v", err)
	}
	if n := h.pollCount(); n != 4 {
		t.Fatalf("%d polls, want 4 (3 answered with a waiting host, then none)", n)
	}
}

// A host that never loads the challenge fails the order after LoadedWait,
// with an error naming it.
func TestAHostThatNeverLoadsTheChallengeFailsTheWaitNamingIt(t *testing.T) {
	h := &slowHosts{hosts: hosts{names: map[string]*contract.Certificate{}}, pending: -1}
	m := newWaitingManager(t, h, 300*time.Millisecond)
	start := time.Now()
	err := m.waitLoaded(t.Context(), "tok")
	if err == nil || !strings.Contains(err.Error(), "hosts h2 did not load the challenge") {
		t.Fatalf("wait: %v, want an error naming h2", err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("gave up after %s, before LoadedWait (300ms)", took)
	}
	if n := h.pollCount(); n < 2 {
		t.Fatalf("%d polls, want the host polled again before giving up", n)
	}
}
