// Package backuptest is the contract every backup.Store keeps (Conformance,
// run on each implementation) and Mem, an in-memory Store that keeps it, for
// pure tests of the engine.
package backuptest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/hatchery/hatchery/internal/backup"
)

// Mem is an in-memory backup.Store. It checks IDs as the real stores do, and
// counts what was put.
type Mem struct {
	mu        sync.Mutex // guards the maps and Puts
	chunks    map[string][]byte
	manifests map[string][]byte
	// Puts counts the Put and PutManifest calls that stored something new.
	Puts int
}

var _ backup.Store = (*Mem)(nil)

// NewMem returns an empty store.
func NewMem() *Mem {
	return &Mem{chunks: map[string][]byte{}, manifests: map[string][]byte{}}
}

func (m *Mem) put(into map[string][]byte, id string, data []byte) error {
	if err := backup.CheckObject(id, data); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := into[id]; !ok {
		into[id] = slices.Clone(data)
		m.Puts++
	}
	return nil
}

func (m *Mem) get(from map[string][]byte, id string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	data, ok := from[id]
	if !ok {
		return nil, fmt.Errorf("object %s: %w", id, backup.ErrNotFound)
	}
	return slices.Clone(data), nil
}

func (m *Mem) Put(_ context.Context, id string, data []byte) error { return m.put(m.chunks, id, data) }

func (m *Mem) Get(_ context.Context, id string) ([]byte, error) { return m.get(m.chunks, id) }

func (m *Mem) Missing(_ context.Context, ids []string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var missing []string
	for _, id := range ids {
		if _, ok := m.chunks[id]; !ok {
			missing = append(missing, id)
		}
	}
	return missing, nil
}

func (m *Mem) PutManifest(_ context.Context, id string, data []byte) error {
	return m.put(m.manifests, id, data)
}

func (m *Mem) GetManifest(_ context.Context, id string) ([]byte, error) {
	return m.get(m.manifests, id)
}

func (m *Mem) ListManifests(context.Context) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Collect(maps.Keys(m.manifests)), nil
}

// Set replaces what is stored under id (a chunk or a manifest) without any
// check, as a damaged disk or a hostile bucket would; nil deletes it.
func (m *Mem) Set(id string, data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, objects := range []map[string][]byte{m.chunks, m.manifests} {
		if _, ok := objects[id]; ok {
			if data == nil {
				delete(objects, id)
			} else {
				objects[id] = data
			}
		}
	}
}

// Conformance checks the contract of backup.Store on store, which must be
// empty.
func Conformance(t *testing.T, store backup.Store) {
	t.Helper()
	ctx := t.Context()
	obj := func(s string) (string, []byte) {
		sum := sha256.Sum256([]byte(s))
		return hex.EncodeToString(sum[:]), []byte(s)
	}
	a, aData := obj("chunk a")
	b, _ := obj("chunk b")
	man, manData := obj("manifest")

	t.Run("a chunk put is got back and no longer missing; putting it again succeeds", func(t *testing.T) {
		for range 2 {
			if err := store.Put(ctx, a, aData); err != nil {
				t.Fatalf("Put: %v", err)
			}
		}
		got, err := store.Get(ctx, a)
		if err != nil || string(got) != string(aData) {
			t.Fatalf("Get = %q, %v; want %q", got, err, aData)
		}
		missing, err := store.Missing(ctx, []string{a, b})
		if err != nil || !slices.Equal(missing, []string{b}) {
			t.Fatalf("Missing(a, b) = %v, %v; want [b]", missing, err)
		}
	})
	t.Run("an unknown chunk or manifest is ErrNotFound", func(t *testing.T) {
		if _, err := store.Get(ctx, b); !errors.Is(err, backup.ErrNotFound) {
			t.Errorf("Get(unknown) = %v, want ErrNotFound", err)
		}
		if _, err := store.GetManifest(ctx, b); !errors.Is(err, backup.ErrNotFound) {
			t.Errorf("GetManifest(unknown) = %v, want ErrNotFound", err)
		}
	})
	t.Run("a chunk whose content does not match its ID is refused", func(t *testing.T) {
		if err := store.Put(ctx, b, aData); err == nil {
			t.Fatal("Put(b, content of a) succeeded")
		}
		if missing, _ := store.Missing(ctx, []string{b}); len(missing) != 1 {
			t.Fatal("the refused chunk is stored")
		}
	})
	t.Run("manifests are listed apart from chunks", func(t *testing.T) {
		if err := store.PutManifest(ctx, man, manData); err != nil {
			t.Fatalf("PutManifest: %v", err)
		}
		if err := store.PutManifest(ctx, man, manData); err != nil {
			t.Fatalf("PutManifest again: %v", err)
		}
		ids, err := store.ListManifests(ctx)
		if err != nil || !slices.Equal(ids, []string{man}) {
			t.Fatalf("ListManifests = %v, %v; want only the manifest", ids, err)
		}
		got, err := store.GetManifest(ctx, man)
		if err != nil || string(got) != string(manData) {
			t.Fatalf("GetManifest = %q, %v", got, err)
		}
		if _, err := store.Get(ctx, man); !errors.Is(err, backup.ErrNotFound) {
			t.Errorf("Get(manifest's ID) = %v, want ErrNotFound: manifests are not chunks", err)
		}
	})
}
