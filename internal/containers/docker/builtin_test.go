package docker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/hatchery/hatchery/internal/contract"
)

// builderAPI is an Engine without images that records builds and refuses
// pulls. Calls the test does not expect panic on the nil embedded API.
type builderAPI struct {
	dockerAPI
	mu      sync.Mutex // guards the fields below
	built   map[string][]byte
	options []build.ImageBuildOptions
	pulls   int
}

func (a *builderAPI) ImageInspect(_ context.Context, ref string, _ ...client.ImageInspectOption) (image.InspectResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.built[ref]; ok {
		return image.InspectResponse{}, nil
	}
	return image.InspectResponse{}, cerrdefs.ErrNotFound
}

func (a *builderAPI) ImagePull(context.Context, string, image.PullOptions) (io.ReadCloser, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pulls++
	return nil, errors.New("no registry here")
}

func (a *builderAPI) ImageBuild(_ context.Context, r io.Reader, o build.ImageBuildOptions) (build.ImageBuildResponse, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return build.ImageBuildResponse{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.built == nil {
		a.built = map[string][]byte{}
	}
	a.built[o.Tags[0]] = data
	a.options = append(a.options, o)
	return build.ImageBuildResponse{Body: io.NopCloser(strings.NewReader(`{"stream":"Successfully built"}` + "\n"))}, nil
}

// A built-in image (the relay's) missing on the Engine is built from the
// context the agent makes, with the classic builder, once; never pulled.
func TestABuiltinImageIsBuiltNotPulled(t *testing.T) {
	api := &builderAPI{}
	cfg := testConfig(t, "h1")
	cfg.SecretDir = t.TempDir()
	made := 0
	cfg.BuiltinImages = map[string]BuiltinImage{"hatch-relay:abc": func() (io.Reader, error) {
		made++
		return bytes.NewReader([]byte("the context")), nil
	}}
	e, err := New(context.Background(), api, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	w := contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: "kv.relay-1", Image: "hatch-relay:abc", Replicas: 1}
	for range 2 {
		ref, err := e.ensureImage(context.Background(), w)
		if err != nil || ref != "hatch-relay:abc" {
			t.Fatalf("ensureImage: %q, %v", ref, err)
		}
	}
	if made != 1 || len(api.options) != 1 || string(api.built["hatch-relay:abc"]) != "the context" {
		t.Fatalf("contexts made %d, builds %d (%q), want one build of the context", made, len(api.options), api.built)
	}
	if o := api.options[0]; o.Version != build.BuilderV1 || o.PullParent {
		t.Errorf("build options %+v: want the classic builder, no pull", o)
	}
	if api.pulls != 0 {
		t.Errorf("%d pulls", api.pulls)
	}
	// Any other image is still pulled.
	if _, err := e.ensureImage(context.Background(), contract.WorkloadSpec{Namespace: "d", Project: "p", Egg: "e", Image: "nginx:1"}); err == nil || api.pulls != 1 {
		t.Errorf("an ordinary image: %v after %d pulls, want the pull's error", err, api.pulls)
	}
}
