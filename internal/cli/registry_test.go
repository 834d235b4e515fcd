package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadPasswordTakesStdinOrAFileAndRefusesNone(t *testing.T) {
	if got, err := readPassword(strings.NewReader("s3cret\n"), ""); err != nil || got != "s3cret" {
		t.Errorf("from stdin: %q, %v", got, err)
	}
	file := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(file, []byte("from-file\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := readPassword(strings.NewReader("ignored"), file); err != nil || got != "from-file" {
		t.Errorf("from a file: %q, %v", got, err)
	}
	if _, err := readPassword(strings.NewReader("\n"), ""); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("an empty password: %v, want refused", err)
	}
	if _, err := readPassword(nil, filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("a missing file: %v, want its name", err)
	}
}

// The password is never a flag: a flag would be in the shell's history and
// in every process listing.
func TestRegistryLoginHasNoPasswordFlag(t *testing.T) {
	cmd := newRegistryLoginCmd()
	if cmd.Flags().Lookup("password") != nil || cmd.Flags().Lookup("password-file") == nil {
		t.Error("hatch registry login must take --password-file and stdin, never --password")
	}
}
