package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/hatchery/hatchery/internal/fsutil"
)

// ErrNotFound is returned by Get for a key that has no value.
var ErrNotFound = errors.New("no such key")

// InvalidError is a request the store refuses as it is: a bad key, or Incr
// on a value that is not an integer. The client must change its request.
type InvalidError struct{ Reason string }

func (e *InvalidError) Error() string { return e.Reason }

func invalidf(format string, args ...any) error {
	return &InvalidError{Reason: fmt.Sprintf(format, args...)}
}

// validKey keeps keys safe to use as file names: no separators, no dot
// files (the store's own temporary files start with a dot).
var validKey = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$`)

// Store keeps each key in its own file under a directory: the container's
// volume. Every write replaces the file atomically (temporary file, fsync,
// rename), so a container killed at any moment leaves the old value or the
// new one, never a torn one; that is what lets the demo's counter survive a
// stop-first roll of kv.
type Store struct {
	dir string
	mu  sync.Mutex // serialises writes, so that Incr's read-modify-write is atomic
}

// Open returns a store on dir, creating the directory if needed.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	return &Store{dir: dir}, nil
}

// CheckKey says why a key cannot be stored, or nil.
func CheckKey(key string) error {
	if !validKey.MatchString(key) {
		return invalidf("key %q: want 1 to 128 of A-Z a-z 0-9 . _ -, not starting with a dot", key)
	}
	return nil
}

// Get returns the value of key, or ErrNotFound.
func (s *Store) Get(key string) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(s.dir, key))
	if errors.Is(err, fs.ErrNotExist) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("get %s: %w", key, err)
	}
	return string(b), nil
}

// Put sets key to value.
func (s *Store) Put(key, value string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.write(key, value)
}

// Incr adds one to the integer kept at key (a missing key counts as zero)
// and returns the new value. A key holding something else than an integer
// is an error and is left as it is.
func (s *Store) Incr(key string) (int64, error) {
	if err := CheckKey(key); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	old, err := s.Get(key)
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return 0, err
	default:
		n, err = strconv.ParseInt(strings.TrimSpace(old), 10, 64)
		if err != nil {
			return 0, invalidf("incr %s: its value is not an integer", key)
		}
	}
	n++
	if err := s.write(key, strconv.FormatInt(n, 10)); err != nil {
		return 0, err
	}
	return n, nil
}

func (s *Store) write(key, value string) error {
	if err := fsutil.WriteFileAtomic(filepath.Join(s.dir, key), []byte(value), 0o644); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}
