// Package seal encrypts small secrets at rest (AES-256-GCM) with a key kept in
// a file beside the data it protects, and makes keyed fingerprints of secret
// values that can be shown and compared without revealing them.
//
// The control plane seals secret values in its store; an agent seals the secret
// values in its cached desired state. A leaked database or cache file alone
// reveals no secret.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/hatchery/hatchery/internal/fsutil"
)

const (
	keySize = 32
	prefix  = "sealed:v1:"
)

// ErrNotSealed is returned by Open for a value that was not made by Seal.
var ErrNotSealed = errors.New("seal: not a sealed value")

// Box seals and opens values with one key. It is safe for concurrent use.
type Box struct {
	aead    cipher.AEAD
	hashKey []byte // for Fingerprint, derived from the key so one file holds both
}

// New returns a Box for a 32-byte key.
func New(key []byte) (*Box, error) {
	if len(key) != keySize {
		return nil, fmt.Errorf("seal key is %d bytes, want %d", len(key), keySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("hatchery fingerprint key"))
	return &Box{aead: aead, hashKey: mac.Sum(nil)}, nil
}

// LoadOrCreate reads the key in path (hex, mode 0600), creating it when the
// file does not exist. A file with wrong content is an error, never replaced:
// replacing it would make everything sealed with it unreadable.
func LoadOrCreate(path string) (*Box, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key := make([]byte, keySize)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		if err := fsutil.WriteFileAtomic(path, []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("write seal key: %w", err)
		}
		return New(key)
	}
	if err != nil {
		return nil, fmt.Errorf("read seal key: %w", err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(data)))
	if err != nil {
		return nil, fmt.Errorf("seal key %s: not hex: restore the original file", path)
	}
	box, err := New(key)
	if err != nil {
		return nil, fmt.Errorf("seal key %s: %w", path, err)
	}
	return box, nil
}

// Seal encrypts plaintext into a printable string "sealed:v1:<base64>", a new
// random nonce each time.
func (b *Box) Seal(plaintext []byte) string {
	nonce := make([]byte, b.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	sealed := b.aead.Seal(nonce, nonce, plaintext, nil)
	return prefix + base64.RawStdEncoding.EncodeToString(sealed)
}

// Open decrypts a string made by Seal with the same key.
func (b *Box) Open(sealed string) ([]byte, error) {
	rest, ok := strings.CutPrefix(sealed, prefix)
	if !ok {
		return nil, ErrNotSealed
	}
	raw, err := base64.RawStdEncoding.DecodeString(rest)
	if err != nil || len(raw) < b.aead.NonceSize() {
		return nil, ErrNotSealed
	}
	nonce, ciphertext := raw[:b.aead.NonceSize()], raw[b.aead.NonceSize():]
	plain, err := b.aead.Open(nil, nonce, ciphertext, nil)
	if err != nil {
		return nil, errors.New("sealed value does not open with this key (wrong key or tampered data)")
	}
	return plain, nil
}

// Fingerprint returns a keyed hash of value, "hmac-sha256:<hex>": equal values
// give equal fingerprints under one key, and without the key nothing about the
// value can be learnt or guessed from it.
func (b *Box) Fingerprint(value []byte) string {
	mac := hmac.New(sha256.New, b.hashKey)
	mac.Write(value)
	return "hmac-sha256:" + hex.EncodeToString(mac.Sum(nil))
}
