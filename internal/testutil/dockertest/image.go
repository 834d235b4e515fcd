package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"
)

// ImageSpec describes a FROM scratch test image: one static binary built from
// a Go main package of this repository, at /app, as the entrypoint.
type ImageSpec struct {
	// Package is the main package, relative to the module root; default
	// "./test/app".
	Package string
	// Env is baked into the image (ENV), so a test can vary an image's
	// behaviour without a workload spec.
	Env map[string]string
	// Healthcheck, if set, becomes the image's HEALTHCHECK.
	Healthcheck *Healthcheck
}

// Healthcheck is an image's HEALTHCHECK instruction. Intervals are whole
// seconds or more in practice: Docker 20.10 accepts no shorter interval than
// 1ms, but the check itself runs a process in the container.
type Healthcheck struct {
	Cmd         []string // exec form, for example {"/app", "-check"}
	Interval    time.Duration
	Timeout     time.Duration
	StartPeriod time.Duration
	Retries     int
}

// AppHealthcheck is the test app's own check, probing quickly so tests do
// not wait long for a health state.
var AppHealthcheck = &Healthcheck{Cmd: []string{"/app", "-check"}, Interval: time.Second, Timeout: 2 * time.Second, Retries: 2}

func (s ImageSpec) pkg() string {
	if s.Package == "" {
		return "./test/app"
	}
	return s.Package
}

// Dockerfile returns the image's Dockerfile.
func (s ImageSpec) Dockerfile() string {
	var b strings.Builder
	b.WriteString("FROM scratch\nCOPY app /app\n")
	keys := make([]string, 0, len(s.Env))
	for k := range s.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, _ := json.Marshal(s.Env[k])
		fmt.Fprintf(&b, "ENV %s=%s\n", k, v)
	}
	if h := s.Healthcheck; h != nil {
		cmd, _ := json.Marshal(h.Cmd)
		b.WriteString("HEALTHCHECK")
		if h.Interval > 0 {
			fmt.Fprintf(&b, " --interval=%s", h.Interval)
		}
		if h.Timeout > 0 {
			fmt.Fprintf(&b, " --timeout=%s", h.Timeout)
		}
		if h.StartPeriod > 0 {
			fmt.Fprintf(&b, " --start-period=%s", h.StartPeriod)
		}
		if h.Retries > 0 {
			fmt.Fprintf(&b, " --retries=%d", h.Retries)
		}
		fmt.Fprintf(&b, " CMD %s\n", cmd)
	}
	b.WriteString(`ENTRYPOINT ["/app"]` + "\n")
	return b.String()
}

// binaries caches built binaries per package for the process: `go build`
// is the slow part of an image, and every image of a package shares it.
var binaries struct {
	mu    sync.Mutex // guards paths
	paths map[string]string
}

// Binary builds pkg (relative to the module root) with CGO_ENABLED=0 for
// linux, once per process, and returns the binary's path.
func Binary(pkg string) (string, error) {
	binaries.mu.Lock()
	defer binaries.mu.Unlock()
	if p, ok := binaries.paths[pkg]; ok {
		return p, nil
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "dockertest-bin-")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, path.Base(pkg))
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("build %s: the go tool is not on PATH: %w", pkg, err)
	}
	cmd := exec.Command(goTool, "build", "-trimpath", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, msg)
	}
	if binaries.paths == nil {
		binaries.paths = map[string]string{}
	}
	binaries.paths[pkg] = out
	return out, nil
}

// ModuleRoot finds the directory of this repository's go.mod, walking up
// from the working directory (a test runs in its package's directory).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module github.com/hatchery/hatchery\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("the hatchery module's go.mod is not above the working directory")
		}
		dir = parent
	}
}

// BuildContext returns the image's build context as a tar stream: the
// Dockerfile and the binary. It is also what a source Blob holds, so the
// adapter's blob builds are tested with it.
func BuildContext(spec ImageSpec) ([]byte, error) {
	bin, err := Binary(spec.pkg())
	if err != nil {
		return nil, err
	}
	binData, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	files := []struct {
		name string
		mode int64
		data []byte
	}{
		{"Dockerfile", 0o644, []byte(spec.Dockerfile())},
		{"app", 0o755, binData},
	}
	for _, f := range files {
		// A fixed time keeps the context's bytes, and so a blob's digest,
		// the same for the same binary.
		hdr := &tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// images caches built image tags per spec for the process.
var images struct {
	mu   sync.Mutex // guards tags
	tags map[string]string
}

// Image builds the image once per process and returns its tag,
// "hatchtest/<package base>:<run>-<n>". The image carries the run label
// (not a scope's: the tests of a process share it) and Main removes it.
func Image(t testing.TB, spec ImageSpec) string {
	t.Helper()
	key, _ := json.Marshal(spec)
	images.mu.Lock()
	defer images.mu.Unlock()
	if tag, ok := images.tags[string(key)]; ok {
		return tag
	}
	cli, err := NewClient(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	tag := fmt.Sprintf("hatchtest/%s:%s-%d", path.Base(spec.pkg()), RunID(), len(images.tags))
	if err := BuildImage(t.Context(), cli, spec, tag, map[string]string{RunLabel: RunID()}); err != nil {
		t.Fatal(err)
	}
	if images.tags == nil {
		images.tags = map[string]string{}
	}
	images.tags[string(key)] = tag
	return tag
}

// BuildImage builds spec with the classic builder (which builds FROM scratch
// offline, unlike BuildKit on 20.10) and tags it.
func BuildImage(ctx context.Context, cli client.APIClient, spec ImageSpec, tag string, labels map[string]string) error {
	tarball, err := BuildContext(spec)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	resp, err := cli.ImageBuild(ctx, bytes.NewReader(tarball), build.ImageBuildOptions{
		Tags:        []string{tag},
		Dockerfile:  "Dockerfile",
		Remove:      true,
		ForceRemove: true,
		Labels:      labels,
		Version:     build.BuilderV1,
	})
	if err != nil {
		return fmt.Errorf("build image %s: %w", tag, err)
	}
	defer resp.Body.Close()
	var log bytes.Buffer
	if err := jsonmessage.DisplayJSONMessagesStream(resp.Body, &log, 0, false, nil); err != nil {
		return fmt.Errorf("build image %s: %w\n%s", tag, err, log.String())
	}
	if _, err := cli.ImageInspect(ctx, tag); err != nil {
		return fmt.Errorf("build image %s: built, but not found: %w", tag, err)
	}
	return nil
}
