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
