package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// counter keeps a request count in a file. Each increment is written to a
// temporary file, synced and renamed over the old one, so a container killed
// at any moment leaves either the old count or the new one, never a torn file:
// the stateful-volume tests compare counts across a stop and a start.
type counter struct {
	path string
	mu   sync.Mutex // guards the read-modify-write of the file
}

func newCounter(path string) *counter { return &counter{path: path} }

// Value returns the count on disk; a missing file counts as zero.
func (c *counter) Value() (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.read()
}

// Add increments the count by one and returns the new value.
func (c *counter) Add() (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.read()
	if err != nil {
		return 0, err
	}
	n++
	if err := c.write(n); err != nil {
		return 0, err
	}
	return n, nil
}

func (c *counter) read() (int, error) {
	b, err := os.ReadFile(c.path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read count: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("read count from %s: %w", c.path, err)
	}
	return n, nil
}

func (c *counter) write(n int) error {
	tmp, err := os.CreateTemp(filepath.Dir(c.path), ".count-*")
	if err != nil {
		return fmt.Errorf("write count: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := fmt.Fprintf(tmp, "%d\n", n); err != nil {
		tmp.Close()
		return fmt.Errorf("write count: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync count: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write count: %w", err)
	}
	if err := os.Rename(tmp.Name(), c.path); err != nil {
		return fmt.Errorf("replace count: %w", err)
	}
	return nil
}
