package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServerBackupKeyPrintsTheKeyInitWroteWithTheAdvice: hatch server init
// writes backup.key with the other shared files; hatch server backup-key
// prints exactly it on stdout, the advice to keep it offline on stderr,
// and never makes one.
func TestServerBackupKeyPrintsTheKeyInitWroteWithTheAdvice(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shared")
	if code, _, errOut := run(t, "server", "init", dir); code != 0 {
		t.Fatalf("hatch server init = %d: %s", code, errOut)
	}
	key, err := os.ReadFile(filepath.Join(dir, "backup.key"))
	if err != nil {
		t.Fatal(err)
	}
	if len(strings.TrimSpace(string(key))) != 64 {
		t.Fatalf("backup.key %q is not 32 bytes in hex", key)
	}
	code, out, errOut := run(t, "server", "backup-key", "--data-dir", dir)
	if code != 0 || out != string(key) || !strings.Contains(errOut, "offline") {
		t.Fatalf("hatch server backup-key = %d %q %q; want the key alone on stdout and the advice on stderr", code, out, errOut)
	}
	none := filepath.Join(t.TempDir(), "none")
	if code, _, errOut := run(t, "server", "backup-key", "--data-dir", none); code == 0 || !strings.Contains(errOut, "backup key") {
		t.Fatalf("a data dir without a key: %d %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(none, "backup.key")); err == nil {
		t.Fatal("hatch server backup-key made a key")
	}
}
