package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestPutThenGetReturnsTheValue(t *testing.T) {
	s := openStore(t)
	if err := s.Put("greeting", "hello"); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get("greeting")
	if err != nil || got != "hello" {
		t.Fatalf("Get = %q, %v; want hello", got, err)
	}
}

func TestGetOfAMissingKeyIsNotFound(t *testing.T) {
	_, err := openStore(t).Get("nothing")
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get = %v, want ErrNotFound", err)
	}
}

func TestIncrCountsFromZeroAndKeepsCounting(t *testing.T) {
	s := openStore(t)
	for want := int64(1); want <= 3; want++ {
		n, err := s.Incr("visits")
		if err != nil || n != want {
			t.Fatalf("Incr = %d, %v; want %d", n, err, want)
		}
	}
}

func TestConcurrentIncrsLoseNoCount(t *testing.T) {
	s := openStore(t)
	const workers, each = 8, 25
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				if _, err := s.Incr("visits"); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if got, _ := s.Get("visits"); got != "200" {
		t.Fatalf("after %d increments the value is %q", workers*each, got)
	}
}

func TestIncrOfANonIntegerIsRefusedAndLeavesTheValue(t *testing.T) {
	s := openStore(t)
	if err := s.Put("name", "kv"); err != nil {
		t.Fatal(err)
	}
	_, err := s.Incr("name")
	var invalid *InvalidError
	if !errors.As(err, &invalid) {
		t.Fatalf("Incr = %v, want an InvalidError", err)
	}
	if got, _ := s.Get("name"); got != "kv" {
		t.Fatalf("the value became %q", got)
	}
}

func TestKeysThatAreNotPlainFileNamesAreRefused(t *testing.T) {
	s := openStore(t)
	for _, key := range []string{"", "../escape", "a/b", ".hidden", strings.Repeat("k", 129), "sp ace"} {
		t.Run(key, func(t *testing.T) {
			var invalid *InvalidError
			if err := s.Put(key, "x"); !errors.As(err, &invalid) {
				t.Errorf("Put(%q) = %v, want an InvalidError", key, err)
			}
			if _, err := s.Get(key); !errors.As(err, &invalid) {
				t.Errorf("Get(%q) = %v, want an InvalidError", key, err)
			}
		})
	}
}

func TestValuesOutliveTheStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Incr("visits"); err != nil {
		t.Fatal(err)
	}
	again, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := again.Incr("visits"); err != nil || n != 2 {
		t.Fatalf("Incr after reopening = %d, %v; want 2", n, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("the data directory holds %d files, want only the key's (no temporary files left)", len(entries))
	}
}

func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}
