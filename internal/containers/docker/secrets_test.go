package docker

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/hatchery/hatchery/internal/contract"
)

// TestSecretsAreNeverWrittenOutsideTheSecretDir: the container's name is
// joined into the secret file's path, so a name that is not one path
// element is refused, and nothing is written anywhere.
func TestSecretsAreNeverWrittenOutsideTheSecretDir(t *testing.T) {
	root := t.TempDir()
	s := secretStore{dir: filepath.Join(root, "a", "b", "secrets")}
	if err := s.init(); err != nil {
		t.Fatal(err)
	}
	secrets := []contract.SecretFile{{Name: "key", Value: "v"}}
	for _, name := range []string{"hatch-shop-x/../../../../escaped/-0-1a2b3c4d-abcdef", "..", ".", "../escaped", "a/b", ""} {
		if paths, err := s.write(name, secrets, ""); err == nil {
			t.Errorf("write(%q) = %v, want it refused", name, paths)
		}
	}
	var written []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			written = append(written, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(written) != 0 {
		t.Fatalf("files written: %v", written)
	}
	if entries, _ := os.ReadDir(s.dir); len(entries) != 0 {
		t.Fatalf("the secret directory holds %d entries", len(entries))
	}
	// A proper name is written inside, and removed.
	paths, err := s.write("hatch-shop-web-0-1a2b3c4d-abcdef", secrets, "")
	if err != nil || filepath.Dir(filepath.Dir(paths["key"])) != s.dir {
		t.Fatalf("write = %v, %v", paths, err)
	}
	if err := s.remove("hatch-shop-web-0-1a2b3c4d-abcdef"); err != nil {
		t.Fatal(err)
	}
}
