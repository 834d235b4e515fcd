//go:build docker

package docker

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/image"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
	"github.com/hatchery/hatchery/internal/testutil/registrytest"
)

// A private image is pulled with the workload's login; with none, a wrong
// one, or a tag the registry does not have, the pull fails as an
// *containers.ImageError carrying the registry's own words and its host,
// and the password is in no log line.
func TestPullUsesTheWorkloadsLoginAndNamesTheRegistrysRefusal(t *testing.T) {
	reg := registrytest.Start(t)
	v := newEnv(t)
	ref := reg.Push(t, v.s.Client, v.image, "hatchtest/pull-"+dockertest.RunID()+":1")
	t.Cleanup(func() { _, _ = v.s.Client.ImageRemove(context.WithoutCancel(t.Context()), ref, image.RemoveOptions{}) })
	login := &contract.RegistryAuth{Registry: reg.Host, Username: reg.Username, Handle: "h", Password: contract.SecretValue(reg.Password)}
	wrong := &contract.RegistryAuth{Registry: reg.Host, Username: reg.Username, Handle: "h", Password: "not-the-password"}
	missing := strings.TrimSuffix(ref, ":1") + ":nope"

	for _, tt := range []struct {
		name  string
		ref   string
		auth  *contract.RegistryAuth
		words string
	}{
		{"no login", ref, nil, "no basic auth credentials"},
		{"a wrong password", ref, wrong, "unauthorized"},
		{"a tag the registry lacks", missing, login, "not found"},
	} {
		err := v.e.pull(t.Context(), tt.ref, tt.auth)
		var ie *containers.ImageError
		if !errors.As(err, &ie) {
			t.Fatalf("%s: err %v, want an *containers.ImageError\n%s", tt.name, err, reg.Log())
		}
		t.Logf("%s: %v", tt.name, ie)
		if ie.Registry != reg.Host || ie.Image != tt.ref || !strings.Contains(strings.ToLower(ie.Reason), tt.words) {
			t.Errorf("%s: %+v, want registry %s, image %s and the registry's %q", tt.name, ie, reg.Host, tt.ref, tt.words)
		}
	}
	if err := v.e.pull(t.Context(), ref, login); err != nil {
		t.Fatalf("pull with the login: %v\n%s", err, reg.Log())
	}
	if present, err := v.e.imagePresent(t.Context(), ref); err != nil || !present {
		t.Fatalf("after the pull, %s present %v, %v", ref, present, err)
	}
	if v.logged(reg.Password) {
		t.Error("a log line holds the registry password")
	}
}

// When the Engine pulls: a pinned reference ("repo@sha256:...") it lacks
// is pulled, then found; a tag with pull: missing is found and never
// pulled while the host has it; a tag with pull: always is pulled for
// every new container, though the host has it.
func TestEnsureImagePullsByThePullPolicy(t *testing.T) {
	reg := registrytest.Start(t)
	v := newEnv(t)
	tag, digest := reg.PushDigest(t, v.s.Client, v.image, "hatchtest/policy-"+dockertest.RunID()+":1")
	pinned, err := contract.PinImage(tag, digest)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, ref := range []string{tag, pinned} {
			_, _ = v.s.Client.ImageRemove(context.WithoutCancel(t.Context()), ref, image.RemoveOptions{})
		}
	})
	login := &contract.RegistryAuth{Registry: reg.Host, Username: reg.Username, Handle: "h", Password: contract.SecretValue(reg.Password)}
	pulls := func() int { return v.logs.FilterMessage("pulling image").Len() }
	ensure := func(ref string, pull contract.PullPolicy) {
		t.Helper()
		w := v.spec("web")
		w.Image, w.Pull, w.PullAuth = ref, pull, login
		if _, err := v.e.ensureImage(t.Context(), w); err != nil {
			t.Fatalf("ensure %s (pull %q): %v\n%s", ref, pull, err, reg.Log())
		}
	}

	if present, err := v.e.imagePresent(t.Context(), pinned); err != nil || present {
		t.Fatalf("%s present %v, %v before any pull: want absent (the push keeps no reference)", pinned, present, err)
	}
	ensure(pinned, "")
	ensure(pinned, "")
	if n := pulls(); n != 1 {
		t.Fatalf("a pinned image was pulled %d times over two starts, want once (then found)", n)
	}
	ensure(tag, contract.PullMissing) // absent: pulled
	ensure(tag, contract.PullMissing) // present: found
	if n := pulls(); n != 2 {
		t.Fatalf("a tag with pull: missing was pulled %d times over two starts, want once", n-1)
	}
	ensure(tag, contract.PullAlways)
	ensure(tag, contract.PullAlways)
	if n := pulls(); n != 4 {
		t.Fatalf("a tag with pull: always was pulled %d times over two starts, want twice", n-2)
	}
}
