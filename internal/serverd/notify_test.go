package serverd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/notify"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

func TestTheNotifySecretIsMadeOnceInTheDataDir(t *testing.T) {
	dir := t.TempDir()
	if _, err := NotifySecret(dir, "", false); err == nil || !strings.Contains(err.Error(), "--data-dir") {
		t.Fatalf("a missing key not to be made: %v, want an error naming --data-dir", err)
	}
	first, err := NotifySecret(dir, "", true)
	if err != nil || len(first) != 64 {
		t.Fatalf("NotifySecret = %q, %v; want 64 hex characters", first, err)
	}
	fi, err := os.Stat(filepath.Join(dir, notifyKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("notify.key: %v, %v; want mode 0600", fi, err)
	}
	again, err := NotifySecret(dir, "", true)
	if err != nil || !bytes.Equal(again, first) {
		t.Fatalf("the second start's secret %q (%v) differs from the first's", again, err)
	}
	key, err := NotifyKey(dir, "", "")
	if err != nil || key != string(first) {
		t.Fatalf("NotifyKey = %q, %v; want the secret", key, err)
	}
	pk, err := NotifyKey(dir, "", "default/shop")
	if err != nil || pk != string(notify.ProjectKey(first, "default/shop")) || pk == key {
		t.Fatalf("NotifyKey of default/shop = %q, %v; want its derived key", pk, err)
	}
	if _, err := NotifyKey(dir, "", "shop"); err == nil || !strings.Contains(err.Error(), "--project") {
		t.Fatalf("a project without its namespace: %v", err)
	}
}

func TestASecretFileIsReadAsItIsAndNeverMade(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "hook-secret")
	if _, err := NotifySecret(dir, file, true); err == nil || !strings.Contains(err.Error(), "--notify-secret-file") {
		t.Fatalf("a missing --notify-secret-file: %v, want an error naming it", err)
	}
	if _, err := os.Stat(filepath.Join(dir, notifyKeyFile)); err == nil {
		t.Fatal("notify.key made though --notify-secret-file is given")
	}
	if err := os.WriteFile(file, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NotifySecret(dir, file, true); err == nil || !strings.Contains(err.Error(), "shorter than 16") {
		t.Fatalf("a short secret: %v", err)
	}
	if err := os.WriteFile(file, []byte("  a secret of the operator's own  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := NotifySecret(dir, file, true)
	if err != nil || string(got) != "a secret of the operator's own" {
		t.Fatalf("NotifySecret = %q, %v; want the file's text, trimmed", got, err)
	}
}

func TestAWebhookFlagIsCheckedBeforeAnyState(t *testing.T) {
	c := DefaultConfig()
	c.Out, c.Logger, c.DataDir = os.Stdout, zap.NewNop(), filepath.Join(t.TempDir(), "data")
	c.RequestTimeout = 1
	c.Notify.Targets = []inputs.NotifyTarget{{URL: "https://ok.example.com/x"},
		{URL: "http://hooks.example.com/x?token=s3cret", Format: inputs.NotifySlack}}
	_, _, _, err := c.components()
	if err == nil || !strings.Contains(err.Error(), "--notify-slack") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("components = %v; want --notify-slack refused without its query", err)
	}
	if _, err := os.Stat(c.DataDir); err == nil {
		t.Fatal("the data dir was made")
	}
}
