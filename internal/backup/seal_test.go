package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
)

// A chunk that authenticates but whose nonce is not its plaintext's MAC (one
// sealed by a writer that does not derive nonces, which would break dedup and
// could reuse a nonce) is refused.
func TestAChunkWhoseNonceIsNotItsContentsMACIsRefused(t *testing.T) {
	key, err := DeriveVolumeKey(bytes.Repeat([]byte{1}, KeySize), VolumeID{Namespace: "n", Project: "p", Volume: "v"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := newSealer(key, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	payload := []byte("some content of a volume")
	id, object := s.seal(chunkAAD, payload)
	if got, err := s.open(id, object, len(chunkAAD), MaxChunk); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("open(seal(x)) = %q, %v", got, err)
	}

	nonce := bytes.Repeat([]byte{9}, nonceSize)
	forged := append(append([]byte{}, chunkAAD...), nonce...)
	forged = s.aead.Seal(forged, nonce, append([]byte{codecNone}, payload...), chunkAAD)
	sum := sha256.Sum256(forged)
	_, err = s.open(hex.EncodeToString(sum[:]), forged, len(chunkAAD), MaxChunk)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open(a chunk with a foreign nonce) = %v, want ErrCorrupt", err)
	}
	t.Log(err)
}

// A chunk is sealed to the same bytes every time (what dedup rests on), and
// its plaintext is compressed when that is smaller.
func TestSealingIsDeterministicAndCompresses(t *testing.T) {
	key, _ := DeriveVolumeKey(bytes.Repeat([]byte{1}, KeySize), VolumeID{Namespace: "n", Project: "p", Volume: "v"})
	s, _ := newSealer(key, 1)
	defer s.close()
	payload := bytes.Repeat([]byte("compressible "), 10000)
	id1, o1 := s.seal(chunkAAD, payload)
	id2, o2 := s.seal(chunkAAD, payload)
	if id1 != id2 || !bytes.Equal(o1, o2) {
		t.Error("the same content sealed twice differs")
	}
	if len(o1) > len(payload)/10 {
		t.Errorf("%d bytes sealed to %d: not compressed", len(payload), len(o1))
	}
}
