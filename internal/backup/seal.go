package backup

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"github.com/klauspost/compress/zstd"
)

// A stored object is
//
//	kind (1 byte) | label | nonce (12 bytes) | AES-256-GCM(plaintext, aad = kind | label)
//
// where label is empty for a chunk and, for a manifest, a 2-byte length and
// the JSON of its VolumeID (so a lister knows which key opens it; the key of
// another volume cannot make a manifest that claims this one). The plaintext
// is a codec byte and the payload, zstd-compressed unless that is no smaller.
// The nonce is the first 12 bytes of HMAC-SHA256(nonce key, aad | plaintext):
// equal plaintexts seal alike (dedup), and two different plaintexts under one
// key never share a nonce unless HMAC collides on 96 bits.
const (
	kindChunk    byte = 1
	kindManifest byte = 2

	codecNone byte = 0
	codecZstd byte = 1

	nonceSize = 12
	// maxStored bounds a stored chunk: kind, nonce, GCM tag, codec, payload.
	maxStored = 1 + nonceSize + 16 + 1 + MaxChunk
	// maxManifest bounds a stored manifest (about 100 bytes a chunk: a
	// 1 TB volume's).
	maxManifest = 1 << 30
)

// sealer seals and opens one volume's objects. Safe for concurrent use
// (zstd's EncodeAll and DecodeAll are; the AEAD and the MAC key are read
// only).
type sealer struct {
	volume   VolumeID
	aead     cipher.AEAD
	nonceKey []byte
	enc      *zstd.Encoder
	dec      *zstd.Decoder
}

func newSealer(k VolumeKey, concurrency int) (*sealer, error) {
	if err := k.volume.Validate(); err != nil {
		return nil, fmt.Errorf("backup key (not made by DeriveVolumeKey or NewVolumeKey): %w", err)
	}
	block, err := aes.NewCipher(k.subkey("encryption"))
	if err != nil {
		return nil, fmt.Errorf("backup cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("backup cipher: %w", err)
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(concurrency), zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithWindowSize(MaxChunk))
	if err != nil {
		return nil, fmt.Errorf("zstd encoder: %w", err)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(concurrency), zstd.WithDecoderMaxMemory(MaxChunk))
	if err != nil {
		return nil, fmt.Errorf("zstd decoder: %w", err)
	}
	return &sealer{volume: k.volume, aead: aead, nonceKey: k.subkey("nonce"), enc: enc, dec: dec}, nil
}

func (s *sealer) close() {
	s.enc.Close()
	s.dec.Close()
}

// seal returns the stored object for payload and its ID.
func (s *sealer) seal(aad, payload []byte) (id string, object []byte) {
	plain := s.enc.EncodeAll(payload, []byte{codecZstd})
	if len(plain)-1 >= len(payload) {
		plain = append([]byte{codecNone}, payload...)
	}
	mac := hmac.New(sha256.New, s.nonceKey)
	mac.Write(aad)
	mac.Write(plain)
	nonce := mac.Sum(nil)[:nonceSize]
	object = make([]byte, 0, len(aad)+nonceSize+len(plain)+s.aead.Overhead())
	object = append(object, aad...)
	object = append(object, nonce...)
	object = s.aead.Seal(object, nonce, plain, aad)
	sum := sha256.Sum256(object)
	return hex.EncodeToString(sum[:]), object
}

// open checks object against its ID, opens it and checks its nonce against
// its plaintext's MAC, and returns the payload, at most limit bytes. Every
// failure wraps ErrCorrupt. aadLen is where the nonce starts.
func (s *sealer) open(id string, object []byte, aadLen, limit int) ([]byte, error) {
	sum := sha256.Sum256(object)
	if hex.EncodeToString(sum[:]) != id {
		return nil, fmt.Errorf("its content does not match its ID: %w", ErrCorrupt)
	}
	if len(object) < aadLen+nonceSize+s.aead.Overhead()+1 {
		return nil, fmt.Errorf("%d bytes is too short: %w", len(object), ErrCorrupt)
	}
	aad, nonce, sealed := object[:aadLen], object[aadLen:aadLen+nonceSize], object[aadLen+nonceSize:]
	plain, err := s.aead.Open(nil, nonce, sealed, aad)
	if err != nil {
		return nil, fmt.Errorf("it does not authenticate with the key of %s: %w", s.volume, ErrCorrupt)
	}
	mac := hmac.New(sha256.New, s.nonceKey)
	mac.Write(aad)
	mac.Write(plain)
	if !hmac.Equal(mac.Sum(nil)[:nonceSize], nonce) {
		return nil, fmt.Errorf("its nonce is not its content's MAC: %w", ErrCorrupt)
	}
	switch plain[0] {
	case codecNone:
		if len(plain)-1 > limit {
			return nil, fmt.Errorf("%d bytes, more than %d: %w", len(plain)-1, limit, ErrCorrupt)
		}
		return plain[1:], nil
	case codecZstd:
		// The decoder's memory limit bounds a chunk's; a manifest's frame
		// size is checked against limit after.
		out, err := s.decode(plain[1:], limit)
		if err != nil {
			return nil, fmt.Errorf("decompress: %v: %w", err, ErrCorrupt)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("unknown codec %d: %w", plain[0], ErrCorrupt)
	}
}

func (s *sealer) decode(src []byte, limit int) ([]byte, error) {
	if limit <= MaxChunk {
		out, err := s.dec.DecodeAll(src, nil)
		if err == nil && len(out) > limit {
			return nil, fmt.Errorf("%d bytes, more than %d", len(out), limit)
		}
		return out, err
	}
	// A manifest may exceed a chunk's memory limit: a decoder of its own.
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(uint64(limit)))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.DecodeAll(src, nil)
}

// chunkAAD is a chunk's authenticated prefix.
var chunkAAD = []byte{kindChunk}

// manifestAAD is a manifest's authenticated prefix: its kind and volume.
func manifestAAD(label []byte) []byte {
	aad := []byte{kindManifest}
	aad = binary.BigEndian.AppendUint16(aad, uint16(len(label)))
	return append(aad, label...)
}
