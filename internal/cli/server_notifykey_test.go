package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/notify"
)

func TestServerNotifyKeyPrintsTheServersKeyAndAProjectsOwn(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shared")
	if code, _, errOut := run(t, "server", "init", dir); code != 0 {
		t.Fatalf("hatch server init = %d: %s", code, errOut)
	}
	secret, err := os.ReadFile(filepath.Join(dir, "notify.key"))
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "server", "notify-key", "--data-dir", dir)
	if code != 0 || out != string(secret) {
		t.Fatalf("hatch server notify-key = %d %q %s; want the data dir's notify.key", code, out, errOut)
	}
	code, out, errOut = run(t, "server", "notify-key", "--data-dir", dir, "--project", "default/shop")
	want := string(notify.ProjectKey([]byte(strings.TrimSpace(string(secret))), "default/shop")) + "\n"
	if code != 0 || out != want {
		t.Fatalf("hatch server notify-key --project = %d %q %s; want %q", code, out, errOut, want)
	}
	if code, _, errOut := run(t, "server", "notify-key", "--data-dir", filepath.Join(t.TempDir(), "none")); code == 0 ||
		!strings.Contains(errOut, "notify") {
		t.Fatalf("a data dir without a key: %d %s", code, errOut)
	}
}
