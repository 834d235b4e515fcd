//go:build docker

package docker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// countingBlobs serves blobs and counts how often each was fetched.
type countingBlobs struct {
	mu     sync.Mutex // guards opened
	blobs  map[string][]byte
	opened map[string]int
}

func (b *countingBlobs) OpenBlob(_ context.Context, digest string) (io.ReadCloser, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	data, ok := b.blobs[digest]
	if !ok {
		return nil, errors.New("no such blob")
	}
	b.opened[digest]++
	return io.NopCloser(bytes.NewReader(data)), nil
}

func (b *countingBlobs) count(digest string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.opened[digest]
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func TestBlobIsBuiltOnceVerifiedAndReused(t *testing.T) {
	// A context of its own (a distinct ENV) so no earlier run left its image.
	ctxTar, err := dockertest.BuildContext(dockertest.ImageSpec{Env: map[string]string{"BLOB_RUN": dockertest.RunID()}})
	if err != nil {
		t.Fatal(err)
	}
	good := digestOf(ctxTar)
	tampered := append(bytes.Clone(ctxTar[:len(ctxTar)-1]), ctxTar[len(ctxTar)-1]^1)
	lying := digestOf([]byte("something else"))
	blobs := &countingBlobs{blobs: map[string][]byte{good: ctxTar, lying: tampered}, opened: map[string]int{}}
	v := newEnv(t, func(c *Config) { c.Blobs = blobs })

	w := v.spec("built")
	w.Image, w.BlobID = "", good
	// Two slots at once: one fetch and one build between them.
	v.start(w, 0, "")
	v.start(w, 1, "")
	first := v.list()
	if len(first) != 2 || first[0].State != contract.StateBuilding || !first[0].Placeholder() {
		t.Errorf("while building, List shows:\n%s", dump(first))
	}
	cs := v.waitFor("both built slots healthy", func(cs []containers.Container) bool { return allHealthy(cs, "built", 2) })
	if n := blobs.count(good); n != 1 {
		t.Errorf("the blob was fetched %d times for two slots, want once", n)
	}
	ref, _ := ImageRef(w)
	img, err := v.s.Client.ImageInspect(t.Context(), ref)
	if err != nil {
		t.Fatalf("the built image is not tagged %s: %v", ref, err)
	}
	if img.Config.Labels[containers.LabelBlob] != good || img.Config.Labels[dockertest.RunLabel] != dockertest.RunID() {
		t.Errorf("built image labels: %v", img.Config.Labels)
	}
	if code, body := v.get(cs[0].ID, "/version"); code != 200 || body != "v1" {
		t.Errorf("built container /version: %d %q", code, body)
	}
	// A later start finds the image and fetches nothing.
	v.start(w, 2, "")
	v.waitFor("three healthy", func(cs []containers.Container) bool { return allHealthy(cs, "built", 3) })
	if n := blobs.count(good); n != 1 {
		t.Errorf("a present image was built again (%d fetches)", n)
	}

	// A blob whose content does not match its digest is never built.
	bad := v.spec("tampered")
	bad.Image, bad.BlobID = "", lying
	v.start(bad, 0, "")
	failure := waitFailure(t, v, "tampered")
	if !errors.Is(failure, ErrDigestMismatch) {
		t.Errorf("tampered blob: %v, want ErrDigestMismatch", failure)
	}
	if len(of(v.list(), "tampered")) != 0 {
		t.Error("a container was made from a tampered blob")
	}
}

func TestMissingImageIsPulledAndAFailedPullIsReported(t *testing.T) {
	v := newEnv(t)
	// Present locally: used as it is.
	v.start(v.spec("present"), 0, "")
	v.waitFor("healthy", func(cs []containers.Container) bool { return allHealthy(cs, "present", 1) })
	if v.logged("pulling image") {
		t.Error("an image present locally was pulled")
	}
	// Missing: pulled, which fails here (no registry is reachable).
	w := v.spec("missing")
	w.Image = "127.0.0.1:1/hatchery/none:" + dockertest.RunID()
	v.start(w, 0, "")
	err := waitFailure(t, v, "missing")
	if !strings.Contains(err.Error(), "pull") {
		t.Errorf("failure %v does not name the pull", err)
	}
	if !v.logged("pulling image") {
		t.Error("the pull was not logged")
	}
}

// waitFailure waits for a start task of the egg to fail and returns its error.
func waitFailure(t *testing.T, v *env, egg string) error {
	t.Helper()
	var found error
	dockertest.Eventually(t, 60*time.Second, 100*time.Millisecond, func() error {
		for _, f := range v.e.Failures() {
			if f.Task.Placeholder.WorkloadID == "default/shop/"+egg {
				found = f.Err
				return nil
			}
		}
		return errors.New("no failure yet")
	})
	return found
}
