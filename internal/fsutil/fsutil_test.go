package fsutil

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteFileAtomicReplacesWholeAndLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := WriteFileAtomic(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(path, []byte("new content"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "new content" {
		t.Fatalf("read %q, %v", got, err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
	if err := WriteFileAtomic(filepath.Join(dir, "missing", "x"), nil, 0o600); err == nil {
		t.Fatal("writing into a missing directory succeeded")
	}
}

func TestPrivateDirMakesAMissingDirectoryOwnerOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "data")
	if err := PrivateDir(dir, "hatch.db"); err != nil {
		t.Fatal(err)
	}
	if mode := perm(t, dir); mode != 0o700 {
		t.Fatalf("mode %04o, want 0700", mode)
	}
}

func TestPrivateDirTightensOnlyHatcherysDirectories(t *testing.T) {
	for _, tc := range []struct {
		name    string
		files   []string
		mode    os.FileMode
		want    os.FileMode
		refused bool
	}{
		{"ours, open to all", []string{"hatch.db", "notes.txt"}, 0o755, 0o700, false},
		{"ours, open to the group", []string{"hatch.db"}, 0o750, 0o700, false},
		{"empty", nil, 0o777, 0o700, false},
		{"already private", []string{"someone's"}, 0o700, 0o700, false},
		{"stricter than private", []string{"hatch.db"}, 0o500, 0o500, false},
		{"someone else's", []string{".bashrc", "projects"}, 0o755, 0o755, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			for _, f := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chmod(dir, tc.mode); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
			err := PrivateDir(dir, "hatch.db", "admin-token")
			if tc.refused {
				if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "chmod 700") {
					t.Fatalf("PrivateDir = %v, want a refusal naming the directory and the fix", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if mode := perm(t, dir); mode != tc.want {
				t.Fatalf("mode %04o, want %04o", mode, tc.want)
			}
		})
	}
}

func TestPrivateDirRefusesAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := PrivateDir(path); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("PrivateDir of a file = %v", err)
	}
}

func perm(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// A write killed before its rename leaves its temporary file: RemoveTemps
// sweeps those of the named files, and nothing else.
func TestRemoveTempsSweepsWhatKilledWritesLeftAndNothingElse(t *testing.T) {
	dir := t.TempDir()
	files := map[string]bool{ // name -> swept
		"state.json":                     false,
		".state.json.tmp-123456":         true,
		".state.json.tmp-9":              true,
		".cache.json.tmp-77":             true,
		".other.json.tmp-1":              false, // not named
		"notes.state.json.tmp-1":         false,
		".state.json.tmp-but-a-dir-here": false, // a directory: not ours
	}
	for name := range files {
		var err error
		if strings.Contains(name, "dir") {
			err = os.Mkdir(filepath.Join(dir, name), 0o700)
		} else {
			err = os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	removed, err := RemoveTemps(dir, "state.json", "cache.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 3 {
		t.Errorf("removed %q, want the 3 temporary files", removed)
	}
	for name, swept := range files {
		_, err := os.Stat(filepath.Join(dir, name))
		if gone := os.IsNotExist(err); gone != swept {
			t.Errorf("%s: gone %v, want %v", name, gone, swept)
		}
	}
	if removed, err := RemoveTemps(filepath.Join(dir, "missing"), "state.json"); err != nil || len(removed) != 0 {
		t.Errorf("a missing dir: removed %q, %v", removed, err)
	}
}
