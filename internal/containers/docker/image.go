package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/pkg/jsonmessage"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

// BlobImageRepo is the repository of images built from source Blobs.
const BlobImageRepo = "hatch-blob"

// ErrDigestMismatch reports a Blob whose content does not hash to its digest.
var ErrDigestMismatch = errors.New("docker: blob content does not match its digest")

// ImageRef returns the image a workload's containers run: its Image
// reference, or for a Blob the tag the Engine gives its build,
// "hatch-blob:<blob hex>-<hash of the build settings>", so one Blob built
// two ways gives two images and a Blob built once is reused.
func ImageRef(w contract.WorkloadSpec) (string, error) {
	switch {
	case w.Image != "":
		return w.Image, nil
	case w.BlobID != "":
		hexDigest, ok := strings.CutPrefix(w.BlobID, "sha256:")
		if !ok || len(hexDigest) != 64 {
			return "", fmt.Errorf("blob %q: want a sha256:<64 hex digits> digest", w.BlobID)
		}
		settings, _ := json.Marshal(w.Build)
		sum := sha256.Sum256(settings)
		return BlobImageRepo + ":" + hexDigest + "-" + hex.EncodeToString(sum[:4]), nil
	default:
		return "", fmt.Errorf("workload %s has neither an image nor a source blob", w.ID())
	}
}

// ensureImage makes the workload's image present: found, pulled or built. Two
// starts needing the same image wait for one pull or build. An image is
// pulled only when absent (a pinned "repo@sha256:..." is present once the
// Engine has those bytes), except with contract.PullAlways, where the tag
// is pulled for every new container.
func (e *Engine) ensureImage(ctx context.Context, w contract.WorkloadSpec) (string, error) {
	ref, err := ImageRef(w)
	if err != nil {
		return "", err
	}
	mu := e.imageLock(ref)
	mu.Lock()
	defer mu.Unlock()
	always := w.Image != "" && w.Pull == contract.PullAlways
	if !always {
		present, err := e.imagePresent(ctx, ref)
		if err != nil || present {
			return ref, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.ImageTimeout)
	defer cancel()
	if b, ok := e.cfg.BuiltinImages[ref]; ok && w.Image != "" {
		return ref, e.buildBuiltin(ctx, ref, b)
	}
	if w.Image != "" {
		return ref, e.pull(ctx, ref, w.PullAuth)
	}
	return ref, e.buildBlob(ctx, w, ref)
}

func (e *Engine) imageLock(ref string) *sync.Mutex {
	e.imageMu.Lock()
	defer e.imageMu.Unlock()
	mu, ok := e.images[ref]
	if !ok {
		mu = &sync.Mutex{}
		e.images[ref] = mu
	}
	return mu
}

func (e *Engine) imagePresent(ctx context.Context, ref string) (bool, error) {
	ctx, cancel := e.call(ctx)
	defer cancel()
	_, err := e.api.ImageInspect(ctx, ref)
	switch {
	case err == nil:
		return true, nil
	case cerrdefs.IsNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("inspect image %s: %w", ref, err)
	}
}

// pull pulls ref with auth (nil: anonymously), logging its progress every
// few seconds. A registry that refuses the image for good gives an
// *containers.ImageError.
func (e *Engine) pull(ctx context.Context, ref string, auth *contract.RegistryAuth) error {
	log := e.log.With(zap.String("image", ref))
	opts := image.PullOptions{}
	if auth != nil {
		// The login goes to the image's registry only: desired states carry
		// it for that registry's images, and the Engine sends it nowhere else.
		encoded, err := registry.EncodeAuthConfig(registry.AuthConfig{Username: auth.Username, Password: string(auth.Password), ServerAddress: auth.Registry})
		if err != nil {
			return fmt.Errorf("pull %s: encode the login of registry %s: %w", ref, auth.Registry, err)
		}
		opts.RegistryAuth = encoded
		log = log.With(zap.String("registry", auth.Registry), zap.String("username", auth.Username))
	}
	log.Info("pulling image")
	rc, err := e.api.ImagePull(ctx, ref, opts)
	if err != nil {
		return pullError(ref, auth, err)
	}
	defer rc.Close()
	if err := followProgress(rc, log, "pull progress"); err != nil {
		return pullError(ref, auth, err)
	}
	log.Info("pulled image")
	return nil
}

// pullError wraps a failed pull: an *containers.ImageError when the
// registry refused the image for good (see refusedPull), else the error.
func pullError(ref string, auth *contract.RegistryAuth, err error) error {
	if refusedPull(err) {
		ie := &containers.ImageError{Image: ref, Registry: contract.ImageRegistry(ref), Reason: err.Error()}
		if auth != nil {
			ie.Login = auth.Handle
		}
		return ie
	}
	return fmt.Errorf("pull %s: %w", ref, err)
}

// refusalWords are what the Engine's pull errors say when the registry
// answered 401, 403 or 404 (distribution's error codes, Docker's own
// words): the stream of a pull carries them untyped.
var refusalWords = []string{
	"unauthorized", "denied", "no basic auth credentials", "authentication required",
	"manifest unknown", "name unknown", "not found", "repository does not exist",
}

// refusedPull reports whether a pull failed because the registry refused
// the login or does not have the image: what trying again will not mend.
// The Engine types some of those errors (a 404 for a missing tag) and
// relays the others as text.
func refusedPull(err error) bool {
	if cerrdefs.IsUnauthorized(err) || cerrdefs.IsPermissionDenied(err) || cerrdefs.IsNotFound(err) {
		return true
	}
	msg := strings.ToLower(err.Error())
	for _, w := range refusalWords {
		if strings.Contains(msg, w) {
			return true
		}
	}
	return false
}

// followProgress reads a Docker JSON progress stream to its end, logging a
// line at most every few seconds, and returns the error the stream reports.
func followProgress(r io.Reader, log *zap.Logger, msg string) error {
	dec := json.NewDecoder(r)
	var last time.Time
	for {
		var m jsonmessage.JSONMessage
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if m.Error != nil {
			return m.Error
		}
		if time.Since(last) >= 3*time.Second && (m.Status != "" || m.Stream != "") {
			last = time.Now()
			fields := []zap.Field{zap.String("status", strings.TrimSpace(m.Status+" "+m.Stream))}
			if m.Progress != nil && m.Progress.Total > 0 {
				fields = append(fields, zap.Int64("current", m.Progress.Current), zap.Int64("total", m.Progress.Total))
			}
			log.Info(msg, fields...)
		}
	}
}

// buildBlob fetches the workload's Blob, checks it against its digest, and
// builds it with the classic builder (which, unlike BuildKit on Docker 20.10,
// builds a FROM scratch context without reaching a registry), tagged ref.
func (e *Engine) buildBlob(ctx context.Context, w contract.WorkloadSpec, ref string) error {
	log := e.log.With(zap.String("workload", w.ID()), zap.String("image", ref))
	log.Info("building image from blob")
	file, err := e.fetchBlob(ctx, w.BlobID)
	if err != nil {
		return fmt.Errorf("build %s: %w", w.ID(), err)
	}
	defer os.Remove(file.Name())
	defer file.Close()

	opts := build.ImageBuildOptions{
		Tags:        []string{ref},
		Remove:      true,
		ForceRemove: true,
		PullParent:  false,
		Version:     build.BuilderV1,
		Labels:      e.labels(map[string]string{containers.LabelManaged: "true", containers.LabelBlob: w.BlobID}),
	}
	if b := w.Build; b != nil {
		opts.Dockerfile = b.Dockerfile
		opts.Target = b.Target
		if len(b.Args) > 0 {
			opts.BuildArgs = make(map[string]*string, len(b.Args))
			for k, v := range b.Args {
				opts.BuildArgs[k] = &v
			}
		}
	}
	resp, err := e.api.ImageBuild(ctx, file, opts)
	if err != nil {
		return fmt.Errorf("build %s: %w", w.ID(), err)
	}
	defer resp.Body.Close()
	if err := followProgress(resp.Body, log, "build progress"); err != nil {
		return fmt.Errorf("build %s: %w", w.ID(), err)
	}
	log.Info("built image")
	return nil
}

// buildBuiltin builds a built-in image from the context its function makes,
// with the classic builder (offline, FROM scratch), tagged ref.
func (e *Engine) buildBuiltin(ctx context.Context, ref string, makeContext BuiltinImage) error {
	log := e.log.With(zap.String("image", ref))
	log.Info("building built-in image")
	tar, err := makeContext()
	if err != nil {
		return fmt.Errorf("build %s: %w", ref, err)
	}
	resp, err := e.api.ImageBuild(ctx, tar, build.ImageBuildOptions{
		Tags:        []string{ref},
		Remove:      true,
		ForceRemove: true,
		PullParent:  false,
		Version:     build.BuilderV1,
		Labels:      e.labels(map[string]string{containers.LabelManaged: "true"}),
	})
	if err != nil {
		return fmt.Errorf("build %s: %w", ref, err)
	}
	defer resp.Body.Close()
	if err := followProgress(resp.Body, log, "build progress"); err != nil {
		return fmt.Errorf("build %s: %w", ref, err)
	}
	log.Info("built image")
	return nil
}

// fetchBlob copies the Blob into a temporary file while hashing it, and
// returns the file rewound if the content matches the digest. Nothing
// unverified reaches the build.
func (e *Engine) fetchBlob(ctx context.Context, digest string) (*os.File, error) {
	want, ok := strings.CutPrefix(digest, "sha256:")
	if !ok {
		return nil, fmt.Errorf("blob %q: only sha256 digests are supported", digest)
	}
	rc, err := e.cfg.Blobs.OpenBlob(ctx, digest)
	if err != nil {
		return nil, fmt.Errorf("fetch blob %s: %w", digest, err)
	}
	defer rc.Close()
	f, err := os.CreateTemp("", "hatch-blob-*.tar")
	if err != nil {
		return nil, fmt.Errorf("fetch blob %s: %w", digest, err)
	}
	fail := func(err error) (*os.File, error) {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(f, h), rc); err != nil {
		return fail(fmt.Errorf("fetch blob %s: %w", digest, err))
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fail(fmt.Errorf("fetch blob %s: got sha256:%s: %w", digest, got, ErrDigestMismatch))
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fail(err)
	}
	return f, nil
}
