package docker

import (
	"errors"
	"fmt"
	"testing"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

// A registry's refusal, typed by the Engine or only in its words, is an
// *containers.ImageError naming the registry and the login used; a failure
// that may pass (a timeout, a refused connection) is not.
func TestPullErrorTellsARefusalFromATransientFailure(t *testing.T) {
	login := &contract.RegistryAuth{Registry: "ghcr.io", Username: "ci", Handle: "h1", Password: "pw"}
	for _, tt := range []struct {
		err     error
		refused bool
	}{
		{fmt.Errorf("manifest unknown: %w", cerrdefs.ErrNotFound), true},
		{cerrdefs.ErrUnauthenticated, true},
		{cerrdefs.ErrPermissionDenied, true},
		{errors.New(`Head "https://ghcr.io/v2/acme/web/manifests/1": no basic auth credentials`), true},
		{errors.New("unauthorized: authentication required"), true},
		{errors.New("pull access denied for acme/web, repository does not exist or may require 'docker login'"), true},
		{errors.New("manifest for ghcr.io/acme/web:2 not found: manifest unknown"), true},
		{errors.New(`Get "https://ghcr.io/v2/": net/http: request canceled while waiting for connection`), false},
		{errors.New("dial tcp 10.0.0.1:443: connect: connection refused"), false},
		{errors.New("toomanyrequests: rate limit exceeded"), false},
	} {
		err := pullError("ghcr.io/acme/web:1", login, tt.err)
		var ie *containers.ImageError
		if errors.As(err, &ie) != tt.refused {
			t.Errorf("%v: refused = %v, want %v", tt.err, !tt.refused, tt.refused)
			continue
		}
		if tt.refused && (ie.Registry != "ghcr.io" || ie.Login != "h1" || ie.Reason != tt.err.Error()) {
			t.Errorf("%v: %+v, want registry ghcr.io, login h1 and the error's words", tt.err, ie)
		}
		if !tt.refused && !errors.Is(err, tt.err) {
			t.Errorf("%v: the error is lost: %v", tt.err, err)
		}
	}
}
