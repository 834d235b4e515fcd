package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSqlitePath(t *testing.T) {
	tests := []struct {
		flag, want, err string
	}{
		{"", "data/hatch.db", ""},
		{"sqlite:/var/lib/hatch/db.sqlite", "/var/lib/hatch/db.sqlite", ""},
		{"sqlite:", "", "want sqlite:<path>"},
		{"postgres://u:secret@db/hatch", "", "not available yet"},
		{"mysql://x", "", "want sqlite:<path>"},
	}
	for _, tt := range tests {
		got, err := sqlitePath(tt.flag, "data")
		if got != tt.want || (err == nil) != (tt.err == "") || err != nil && !strings.Contains(err.Error(), tt.err) {
			t.Errorf("sqlitePath(%q) = %q, %v; want %q, error containing %q", tt.flag, got, err, tt.want, tt.err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("the error repeats the store URL's password: %v", err)
		}
	}
}

func TestServerRefusesABadStoreBeforeStarting(t *testing.T) {
	code, _, errOut := run(t, "server", "--data-dir", t.TempDir(), "--store", "mysql://x")
	if code != 1 || !strings.Contains(errOut, "sqlite:<path>") {
		t.Fatalf("hatch server --store mysql://x = %d %q", code, errOut)
	}
}

func TestServerRefusesMaxReplicasBeyondTheFilesLimit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	code, _, errOut := run(t, "server", "--data-dir", dir, "--max-replicas", "20000")
	if code != 1 || !strings.Contains(errOut, "--max-replicas") || !strings.Contains(errOut, "10000") {
		t.Fatalf("hatch server --max-replicas 20000 = %d %q", code, errOut)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the data dir was made before the flags were checked: %v", err)
	}
}
