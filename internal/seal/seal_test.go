package seal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSealOpenRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seal.key")
	box, err := LoadOrCreate(path)
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("s3cret-value")
	a, b := box.Seal(secret), box.Seal(secret)
	if a == b {
		t.Fatal("two seals of one value are equal: the nonce is not random")
	}
	if strings.Contains(a, "s3cret") {
		t.Fatal("the sealed form shows the value")
	}
	// A restart loads the same key and opens what was sealed before.
	again, err := LoadOrCreate(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := again.Open(a)
	if err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("Open = %q, %v", got, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestOpenRefusesTamperingAndOtherKeys(t *testing.T) {
	box, err := LoadOrCreate(filepath.Join(t.TempDir(), "k"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := LoadOrCreate(filepath.Join(t.TempDir(), "k"))
	if err != nil {
		t.Fatal(err)
	}
	sealed := box.Seal([]byte("value"))
	if _, err := other.Open(sealed); err == nil {
		t.Fatal("another key opened the value")
	}
	tampered := sealed[:len(sealed)-2] + "AA"
	if tampered == sealed {
		tampered = sealed[:len(sealed)-2] + "BB"
	}
	if _, err := box.Open(tampered); err == nil {
		t.Fatal("a tampered value opened")
	}
	if _, err := box.Open("plain"); !errors.Is(err, ErrNotSealed) {
		t.Fatalf("Open(plain) = %v, want ErrNotSealed", err)
	}
}

func TestFingerprintIsKeyed(t *testing.T) {
	box, _ := LoadOrCreate(filepath.Join(t.TempDir(), "k"))
	other, _ := LoadOrCreate(filepath.Join(t.TempDir(), "k"))
	v := []byte("value")
	if first, second := box.Fingerprint(v), box.Fingerprint(v); first != second {
		t.Fatal("fingerprint not deterministic")
	}
	if box.Fingerprint(v) == box.Fingerprint([]byte("value2")) {
		t.Fatal("different values, same fingerprint")
	}
	if box.Fingerprint(v) == other.Fingerprint(v) {
		t.Fatal("fingerprint does not depend on the key")
	}
}

func TestLoadOrCreateNeverReplacesABadKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k")
	if err := os.WriteFile(path, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreate(path); err == nil {
		t.Fatal("a malformed key file was accepted")
	}
	data, _ := os.ReadFile(path)
	if string(data) != "not a key" {
		t.Fatal("the malformed key file was overwritten")
	}
}
