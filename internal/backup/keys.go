package backup

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/restic/chunker"
	"golang.org/x/crypto/hkdf"
)

// KeySize is the size of the cluster's backup key and of a volume's key.
const KeySize = 32

// VolumeID names a volume across the cluster: the key derivation's input and
// a manifest's clear-text label.
type VolumeID struct {
	Namespace string `json:"namespace"`
	Project   string `json:"project"`
	Volume    string `json:"volume"`
}

func (v VolumeID) String() string { return v.Namespace + "/" + v.Project + "/" + v.Volume }

// Validate refuses an empty part: each part is length-prefixed in the
// derivation, so any other string is unambiguous.
func (v VolumeID) Validate() error {
	var errs []error
	for _, p := range []struct{ name, value string }{{"namespace", v.Namespace}, {"project", v.Project}, {"volume", v.Volume}} {
		if p.value == "" {
			errs = append(errs, fmt.Errorf("volume id: %s is empty", p.name))
		}
	}
	return errors.Join(errs...)
}

// VolumeKey is one volume's backup key, derived from the cluster's backup key
// by DeriveVolumeKey: all a host ever holds. Its subkeys (encryption, the
// nonce MAC, the chunker's polynomial) are derived from it by HKDF with
// distinct labels, so no key serves two purposes.
type VolumeKey struct {
	volume VolumeID
	secret [KeySize]byte
}

// DeriveVolumeKey derives volume's key from the cluster's backup key:
// HKDF-SHA256 with the volume's namespace, project and name, each
// length-prefixed, as its info. Stable: the same inputs give the same key.
func DeriveVolumeKey(clusterKey []byte, volume VolumeID) (VolumeKey, error) {
	if len(clusterKey) != KeySize {
		return VolumeKey{}, fmt.Errorf("backup key: %d bytes, want %d", len(clusterKey), KeySize)
	}
	if err := volume.Validate(); err != nil {
		return VolumeKey{}, err
	}
	info := []byte("hatchery backup volume key v1")
	for _, p := range []string{volume.Namespace, volume.Project, volume.Volume} {
		info = binary.BigEndian.AppendUint32(info, uint32(len(p)))
		info = append(info, p...)
	}
	k := VolumeKey{volume: volume}
	if _, err := io.ReadFull(hkdf.New(sha256.New, clusterKey, nil, info), k.secret[:]); err != nil {
		return VolumeKey{}, fmt.Errorf("derive the key of %s: %w", volume, err)
	}
	return k, nil
}

// NewVolumeKey is a volume's key as handed to a host (Secret's bytes).
func NewVolumeKey(volume VolumeID, secret []byte) (VolumeKey, error) {
	if len(secret) != KeySize {
		return VolumeKey{}, fmt.Errorf("volume key of %s: %d bytes, want %d", volume, len(secret), KeySize)
	}
	if err := volume.Validate(); err != nil {
		return VolumeKey{}, err
	}
	k := VolumeKey{volume: volume}
	copy(k.secret[:], secret)
	return k, nil
}

// Volume is the volume the key is for.
func (k VolumeKey) Volume() VolumeID { return k.volume }

// Secret is the key's bytes, to be sealed into the desired state of the
// volume's host; never logged.
func (k VolumeKey) Secret() []byte { return append([]byte(nil), k.secret[:]...) }

// subkey derives the key for one purpose.
func (k VolumeKey) subkey(purpose string) []byte {
	out := make([]byte, KeySize)
	if _, err := io.ReadFull(hkdf.New(sha256.New, k.secret[:], nil, []byte("hatchery backup "+purpose)), out); err != nil {
		panic("hkdf: " + err.Error()) // 32 bytes of SHA-256's HKDF cannot fail
	}
	return out
}

// polynomial derives the chunker's Rabin polynomial from the key, so that
// chunk boundaries (which say something about content) cannot be matched
// across volumes; dedup across volumes is impossible anyway, their keys
// differing. Deterministic: the same volume cuts the same content alike.
func (k VolumeKey) polynomial() (chunker.Pol, error) {
	return chunker.DerivePolynomial(hkdf.New(sha256.New, k.secret[:], nil, []byte("hatchery backup chunker polynomial")))
}

// ValidID reports whether s is an object's ID: a hex SHA-256, 64 lowercase
// digits. A store checks it before making a name of it.
func ValidID(s string) bool {
	if len(s) != 2*sha256.Size || strings.ToLower(s) != s {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// CheckObject refuses data whose SHA-256 is not id: what every Store checks
// on Put, since a backup's integrity rests on it.
func CheckObject(id string, data []byte) error {
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != id {
		return fmt.Errorf("object %s: its content's sha256 is %x", id, sum)
	}
	return nil
}
