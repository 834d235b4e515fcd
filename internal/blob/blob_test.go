package blob

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/reconciler"
)

// The file store's own: what a crash leaves is cleared at the next Open,
// and the running total of bytes is counted again.
func TestReopenCountsBlobsAndClearsInterruptedUploads(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	digest := "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" // "abc"
	if _, _, err := s.Put(t.Context(), digest, strings.NewReader("abc"), 10); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.tmpDir(), "upload-crashed"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Bytes(t.Context()); n != 3 {
		t.Fatalf("Bytes after reopen = %d, want 3", n)
	}
	if left, _ := os.ReadDir(s.tmpDir()); len(left) != 0 {
		t.Fatalf("%d temporary files left behind", len(left))
	}
}

var _ reconciler.SourceStorage = (*Store)(nil)
