// Package imageref resolves an image's tag to the digest its registry
// serves now, through the registry's own API (go-containerregistry), with
// the login the hosts pull with. The control plane pins every egg's image
// to that digest when it makes a plan, so that every host runs the same
// bytes and a rollback brings them back after the tag moved; a host never
// decides what the others run.
//
// A registry on a loopback or private (RFC 1918) address is spoken to over
// plain HTTP, as the Engine does with registries it is told are insecure;
// any other over HTTPS.
package imageref

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/hatchery/hatchery/internal/contract"
)

// Login is the username and password a registry is asked with.
type Login struct {
	Username string
	Password string
}

// Error is a tag that could not be resolved: its image, the registry
// asked (as image references name it: docker.io for Docker Hub) and why,
// in the registry's words when it answered.
type Error struct {
	Image    string
	Registry string
	Err      error
}

func (e *Error) Error() string {
	if e.Registry == "" { // a reference no registry can be told from
		return fmt.Sprintf("image %s: %v", e.Image, e.Err)
	}
	return fmt.Sprintf("image %s: registry %s: %v", e.Image, e.Registry, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// DefaultTimeout bounds one resolution, retries included.
const DefaultTimeout = 15 * time.Second

// Registry resolves tags through their registries. Its zero value is
// ready to use.
type Registry struct {
	// Timeout bounds one resolution (0: DefaultTimeout).
	Timeout time.Duration
	// Transport carries its requests (nil: http.DefaultTransport).
	Transport http.RoundTripper
}

// Resolve returns the digest ("sha256:...") the registry serves for
// image's tag now, asking with login (nil: anonymously). A reference that
// names a digest already is returned as it is, unasked. What the registry
// refuses (no such tag, a login it does not take) or never answers is an
// *Error.
func (r Registry) Resolve(ctx context.Context, image string, login *Login) (string, error) {
	if d := contract.ImageDigest(image); d != "" {
		return d, nil
	}
	fail := func(err error) (string, error) {
		return "", &Error{Image: image, Registry: contract.ImageRegistry(image), Err: err}
	}
	ref, err := name.ParseReference(image)
	if err != nil {
		return fail(err)
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var auth authn.Authenticator = authn.Anonymous
	if login != nil {
		auth = &authn.Basic{Username: login.Username, Password: login.Password}
	}
	tr := r.Transport
	if tr == nil {
		tr = http.DefaultTransport
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuth(auth), remote.WithTransport(tr),
		remote.WithRetryBackoff(remote.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 3})}
	desc, err := remote.Head(ref, opts...)
	var answer *transport.Error
	if errors.As(err, &answer) {
		// The registry answered, but a HEAD's answer has no body: a GET
		// has the registry's own words (UNAUTHORIZED, MANIFEST_UNKNOWN),
		// and some mirrors answer only GET for manifests.
		var got *remote.Descriptor
		if got, err = remote.Get(ref, opts...); err == nil {
			desc = &v1.Descriptor{Digest: got.Digest}
		}
	}
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, context.Canceled) {
			err = fmt.Errorf("no answer within %v: %w", timeout, err)
		}
		return fail(err)
	}
	return desc.Digest.String(), nil
}
