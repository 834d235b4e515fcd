package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestServerRefusesABadStoreBeforeStarting(t *testing.T) {
	code, _, errOut := run(t, "server", "--data-dir", t.TempDir(), "--store", "mysql://x")
	if code != 1 || !strings.Contains(errOut, "sqlite:<path>") {
		t.Fatalf("hatch server --store mysql://x = %d %q", code, errOut)
	}
	code, _, errOut = run(t, "server", "--data-dir", t.TempDir(), "--store", "postgres://hatch:hunter2@127.0.0.1/x")
	if code != 1 || !strings.Contains(errOut, "PGPASSFILE") || strings.Contains(errOut, "hunter2") {
		t.Fatalf("hatch server --store with a password = %d %q", code, errOut)
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
