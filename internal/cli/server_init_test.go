package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/pki"
)

func TestServerInitWritesTheSharedFilesOnceAndAServerUsesThem(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shared")
	code, out, errOut := run(t, "server", "init", dir)
	if code != 0 {
		t.Fatalf("hatch server init = %d: %s", code, errOut)
	}
	want := []string{"tls/ca.pem", "tls/ca-key.pem", "tls/host-ca.pem", "tls/host-ca-key.pem", "seal.key", "admin-token", "acme-account.key", "notify.key"}
	written := map[string][]byte{}
	for _, f := range want {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatalf("%s not written: %v", f, err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, fi.Mode().Perm())
		}
		written[f], _ = os.ReadFile(filepath.Join(dir, f))
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the directory: %v, %v; want 0700", fi, err)
	}
	for _, f := range []string{"tls/server.pem", "tls/server-key.pem", "hatch.db"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("%s written: each server makes its own", f)
		}
	}
	tok, err := pki.ParseToken(string(written["admin-token"]))
	if err != nil || tok.Kind != pki.KindAdmin || !strings.Contains(out, tok.Fingerprint) {
		t.Fatalf("admin token %v (%v), output %q: want an admin token pinning the CA the output names", tok.Kind, err, out)
	}

	// A second init refuses, naming the file, and changes nothing.
	code, _, errOut = run(t, "server", "init", dir)
	if code == 0 || !strings.Contains(errOut, "exists") {
		t.Fatalf("a second hatch server init = %d %q, want a refusal", code, errOut)
	}
	for _, f := range want {
		if b, _ := os.ReadFile(filepath.Join(dir, f)); string(b) != string(written[f]) {
			t.Fatalf("%s changed by the refused init", f)
		}
	}

	// A server started on a copy serves with that CA and takes that admin token.
	data := filepath.Join(t.TempDir(), "data")
	for _, f := range want {
		copyFile(t, filepath.Join(dir, f), filepath.Join(data, f))
	}
	cfgPath := filepath.Join(t.TempDir(), "config.json")
	var logs lockedBuffer
	startServerProc(t, &logs, "--data-dir", data, "--listen", "127.0.0.1:0", "--cli-config", cfgPath)
	var cfg client.Config
	eventually(t, 30*time.Second, "the server wrote its CLI config", func() bool {
		var ok bool
		cfg, ok, err = client.Load(cfgPath)
		return err == nil && ok
	})
	if strings.TrimSpace(cfg.Token) != strings.TrimSpace(string(written["admin-token"])) {
		t.Fatal("the server's CLI config holds another admin token than init's")
	}
	if strings.Contains(logs.String(), "admin token (shown once") {
		t.Fatal("the server made an admin token of its own")
	}
	code, out, errOut = run(t, "hosts", "--server", cfg.Server, "--token", cfg.Token)
	if code != 0 {
		t.Fatalf("hatch hosts with init's admin token, pinned to init's CA = %d %s %s", code, out, errOut)
	}
	for _, f := range want {
		if b, _ := os.ReadFile(filepath.Join(data, f)); string(b) != string(written[f]) {
			t.Fatalf("%s changed by the server", f)
		}
	}
}
