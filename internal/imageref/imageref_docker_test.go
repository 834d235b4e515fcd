//go:build docker

package imageref_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/imageref"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
	"github.com/hatchery/hatchery/internal/testutil/listentest"
	"github.com/hatchery/hatchery/internal/testutil/registrytest"
)

// Against a real registry (plain HTTP on loopback, htpasswd): a tag
// resolves, with the login, to the digest the Engine recorded when it
// pushed it; a pushed other image under the same tag resolves to another
// digest; without the login, for a tag it lacks, or with no registry
// there, the error names the registry and says why.
func TestRegistryResolvesATagToTheDigestThePushRecorded(t *testing.T) {
	reg := registrytest.Start(t)
	scope := dockertest.NewScope(t)
	repo := "hatchtest/resolve-" + dockertest.RunID()
	one := dockertest.Image(t, dockertest.ImageSpec{})
	two := dockertest.Image(t, dockertest.ImageSpec{Env: map[string]string{"APP_VERSION": "resolve-2"}})
	login := &imageref.Login{Username: reg.Username, Password: reg.Password}
	r := imageref.Registry{Timeout: 10 * time.Second}

	ref, pushed := reg.PushDigest(t, scope.Client, one, repo+":main")
	got, err := r.Resolve(t.Context(), ref, login)
	if err != nil || got != pushed {
		t.Fatalf("Resolve(%s) = %s, %v; want the pushed digest %s\n%s", ref, got, err, pushed, reg.Log())
	}
	_, second := reg.PushDigest(t, scope.Client, two, repo+":main")
	moved, err := r.Resolve(t.Context(), ref, login)
	if err != nil || moved == got || moved != second {
		t.Fatalf("after the tag moved Resolve = %s, %v; want the second image's digest, not %s", moved, err, got)
	}
	if pinned, err := r.Resolve(t.Context(), reg.Host+"/"+repo+"@"+got, nil); err != nil || pinned != got {
		t.Fatalf("a pinned reference resolved to %s, %v; want itself, unasked", pinned, err)
	}

	for _, c := range []struct {
		name, ref string
		login     *imageref.Login
		registry  string
		words     string
	}{
		{"no login", ref, nil, reg.Host, "unauthorized"},
		{"a wrong password", ref, &imageref.Login{Username: reg.Username, Password: "nope"}, reg.Host, "unauthorized"},
		{"a tag it lacks", reg.Host + "/" + repo + ":absent", login, reg.Host, "manifest unknown"},
		{"no registry there", listentest.FreeAddr(t) + "/" + repo + ":main", login, "", "connection refused"},
	} {
		_, err := r.Resolve(t.Context(), c.ref, c.login)
		var ie *imageref.Error
		if !errors.As(err, &ie) {
			t.Fatalf("%s: %v, want an *imageref.Error", c.name, err)
		}
		t.Logf("%s: %v", c.name, err)
		if c.registry == "" {
			c.registry = strings.SplitN(c.ref, "/", 2)[0]
		}
		if ie.Registry != c.registry || !strings.Contains(strings.ToLower(err.Error()), c.words) {
			t.Errorf("%s: %v, want registry %s and %q", c.name, err, c.registry, c.words)
		}
		if strings.Contains(err.Error(), reg.Password) {
			t.Errorf("%s: the error shows the password", c.name)
		}
	}
}
