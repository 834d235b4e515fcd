// Package imagereftest is a fake of imageref's Registry for pure tests:
// tags resolve to digests a test sets (or one made of the image's name),
// registries can be made unreachable, and every call is counted with the
// login it carried.
package imagereftest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/imageref"
)

// Fake resolves tags without a registry. Safe for concurrent use.
type Fake struct {
	mu          sync.Mutex // guards every field below
	digests     map[string]string
	unreachable map[string]bool
	calls       []Call
}

// Call is one Resolve the fake answered.
type Call struct {
	Image string
	Login *imageref.Login
}

// ErrUnreachable is what an unreachable registry's resolutions wrap.
var ErrUnreachable = errors.New("dial tcp: connection refused")

// New returns a fake where every tag resolves to DigestOf(image).
func New() *Fake {
	return &Fake{digests: map[string]string{}, unreachable: map[string]bool{}}
}

// DigestOf is the digest a tag resolves to until Move sets another: the
// sha256 of its reference.
func DigestOf(image string) string {
	sum := sha256.Sum256([]byte(image))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Move makes image's tag resolve to the digest of content from now on, and
// returns that digest.
func (f *Fake) Move(image, content string) string {
	sum := sha256.Sum256([]byte(content))
	d := "sha256:" + hex.EncodeToString(sum[:])
	f.mu.Lock()
	defer f.mu.Unlock()
	f.digests[image] = d
	return d
}

// Unreachable makes a registry host (as contract.ImageRegistry names it)
// answer nothing, or answer again.
func (f *Fake) Unreachable(host string, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unreachable[host] = down
}

// Calls returns the resolutions asked so far.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// Resolve answers as imageref.Registry would, without a registry.
func (f *Fake) Resolve(_ context.Context, image string, login *imageref.Login) (string, error) {
	if d := contract.ImageDigest(image); d != "" {
		return d, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, Call{Image: image, Login: login})
	host := contract.ImageRegistry(image)
	if f.unreachable[host] {
		return "", &imageref.Error{Image: image, Registry: host, Err: ErrUnreachable}
	}
	if d, ok := f.digests[image]; ok {
		return d, nil
	}
	return DigestOf(image), nil
}
