// Package reconcilertest provides in-memory implementations of the
// reconciler's interfaces for tests: a ResourceStorage, a SourceStorage, and
// a fake outside world whose providers create idempotently by ID and log every
// call, so tests can check ordering, concurrency and duplicates.
package reconcilertest

import (
	"context"
	"sort"
	"sync"

	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
)

// Storage is an in-memory reconciler.ResourceStorage. Like a real store it
// refuses work once the caller's context is done, and stores copies.
type Storage struct {
	mu       sync.Mutex                               // guards projects
	projects map[string]map[string]*resource.Deployed // project -> key -> record
}

var _ reconciler.ResourceStorage = (*Storage)(nil)

// NewStorage returns an empty Storage.
func NewStorage() *Storage {
	return &Storage{projects: map[string]map[string]*resource.Deployed{}}
}

// PutResource inserts or replaces the record with r's type and name.
func (s *Storage) PutResource(ctx context.Context, project string, r *resource.Deployed) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	recs := s.projects[project]
	if recs == nil {
		recs = map[string]*resource.Deployed{}
		s.projects[project] = recs
	}
	recs[r.Key()] = r.Clone()
	return nil
}

// DeleteResource removes the record with r's type and name, if there is one.
func (s *Storage) DeleteResource(ctx context.Context, project string, r *resource.Deployed) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.projects[project], r.Key())
	return nil
}

// ListResources returns copies of the project's records, sorted by key.
func (s *Storage) ListResources(ctx context.Context, project string) ([]*resource.Deployed, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*resource.Deployed, 0, len(s.projects[project]))
	for _, r := range s.projects[project] {
		out = append(out, r.Clone())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out, nil
}

// Get returns a copy of one record.
func (s *Storage) Get(project, key string) (*resource.Deployed, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.projects[project][key]
	return r.Clone(), ok
}

// Sources is an in-memory reconciler.SourceStorage: a set of digests.
type Sources struct {
	mu      sync.Mutex // guards digests
	digests map[string]bool
}

var _ reconciler.SourceStorage = (*Sources)(nil)

// NewSources returns a Sources holding the digests.
func NewSources(digests ...string) *Sources {
	s := &Sources{digests: map[string]bool{}}
	for _, d := range digests {
		s.digests[d] = true
	}
	return s
}

// Add stores a digest.
func (s *Sources) Add(digest string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.digests[digest] = true
}

// HasSource reports whether the digest was added.
func (s *Sources) HasSource(ctx context.Context, digest string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.digests[digest], nil
}
