package docker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/ingress"
)

func fullSpec() contract.WorkloadSpec {
	return contract.WorkloadSpec{
		Namespace: "default", Project: "shop", Egg: "web",
		Image:       "app:1",
		Command:     []string{"--port", "8080"},
		Entrypoint:  []string{"/app"},
		User:        "1000:1000",
		WorkingDir:  "/srv",
		Env:         map[string]string{"B": "2", "A": "1"},
		Aliases:     []string{"shop-web", "web"},
		Health:      contract.HealthCheck{Cmd: []string{"/app", "-check"}, Interval: time.Second, Retries: 2},
		Volumes:     []contract.VolumeMount{{Name: "data", DockerName: "hatch-shop-data-1", Target: "/data"}},
		Binds:       []contract.BindMount{{Source: "/etc/hosts", Target: "/h", ReadOnly: true}},
		Secrets:     []contract.SecretFile{{Name: "api_key", Handle: "h1", Value: "s3cret"}},
		Tmpfs:       []string{"/tmp", "/cache:size=1m"},
		ReadOnly:    true,
		CapAdd:      []string{"NET_ADMIN"},
		CapDrop:     []string{"ALL"},
		Networks:    []string{"net-a", "net-b", "net-c"},
		Resources:   contract.Resources{MemoryBytes: 64 << 20, NanoCPUs: 5e8, PIDs: 100},
		StopSignal:  "SIGUSR1",
		StopTimeout: 1500 * time.Millisecond,
	}
}

func TestPlanCreateCarriesTheWholeSpec(t *testing.T) {
	req := containers.StartRequest{HostID: "h1", Spec: fullSpec(), SpecHash: "abc", Slot: 2}
	labels := map[string]string{"x": "y"}
	p := planCreate(req, "app:1", "hatch-shop-web-2-x", labels, map[string]string{"api_key": "/dev/shm/hatch/h1/c/api_key"})

	c, h := p.config, p.host
	if c.Image != "app:1" || !reflect.DeepEqual([]string(c.Cmd), []string{"--port", "8080"}) || !reflect.DeepEqual([]string(c.Entrypoint), []string{"/app"}) {
		t.Errorf("image/cmd/entrypoint: %q %q %q", c.Image, c.Cmd, c.Entrypoint)
	}
	if c.User != "1000:1000" || c.WorkingDir != "/srv" || !reflect.DeepEqual(c.Labels, labels) {
		t.Errorf("user/workdir/labels: %q %q %v", c.User, c.WorkingDir, c.Labels)
	}
	if !reflect.DeepEqual(c.Env, []string{"A=1", "B=2"}) {
		t.Errorf("env not sorted: %v", c.Env)
	}
	if c.StopSignal != "SIGUSR1" || c.StopTimeout == nil || *c.StopTimeout != 2 {
		t.Errorf("stop signal %q timeout %v, want SIGUSR1 and 1.5s rounded up to 2", c.StopSignal, c.StopTimeout)
	}
	if c.Healthcheck == nil || !reflect.DeepEqual(c.Healthcheck.Test, []string{"CMD", "/app", "-check"}) || c.Healthcheck.Retries != 2 || c.Healthcheck.Interval != time.Second {
		t.Errorf("healthcheck: %+v", c.Healthcheck)
	}
	if !h.ReadonlyRootfs || !reflect.DeepEqual([]string(h.CapAdd), []string{"NET_ADMIN"}) || !reflect.DeepEqual([]string(h.CapDrop), []string{"ALL"}) {
		t.Errorf("read-only/caps: %v %v %v", h.ReadonlyRootfs, h.CapAdd, h.CapDrop)
	}
	if !reflect.DeepEqual(h.SecurityOpt, []string{"no-new-privileges:true"}) {
		t.Errorf("security options: %v", h.SecurityOpt)
	}
	if h.Memory != 64<<20 || h.NanoCPUs != 5e8 || h.PidsLimit == nil || *h.PidsLimit != 100 {
		t.Errorf("resources: %+v", h.Resources)
	}
	if h.RestartPolicy.Name != container.RestartPolicyDisabled {
		t.Errorf("restart policy %q: the agent restarts, not Docker", h.RestartPolicy.Name)
	}
	if !reflect.DeepEqual(h.Tmpfs, map[string]string{"/tmp": "", "/cache": "size=1m"}) {
		t.Errorf("tmpfs: %v", h.Tmpfs)
	}
	wantMounts := []mount.Mount{
		{Type: mount.TypeVolume, Source: "hatch-shop-data-1", Target: "/data"},
		{Type: mount.TypeBind, Source: "/etc/hosts", Target: "/h", ReadOnly: true},
		{Type: mount.TypeBind, Source: "/dev/shm/hatch/h1/c/api_key", Target: "/run/secrets/api_key", ReadOnly: true},
	}
	if !reflect.DeepEqual(h.Mounts, wantMounts) {
		t.Errorf("mounts:\n got %+v\nwant %+v", h.Mounts, wantMounts)
	}
	// API 1.41: created on the first network, connected to the others.
	if h.NetworkMode != "net-a" || len(p.network.EndpointsConfig) != 1 || p.network.EndpointsConfig["net-a"] == nil {
		t.Fatalf("create networks: mode %q, endpoints %v", h.NetworkMode, p.network.EndpointsConfig)
	}
	// A replica carries neither its egg's name nor its aliases: relays do.
	if got := p.network.EndpointsConfig["net-a"].Aliases; len(got) != 0 {
		t.Errorf("aliases on the first network: %v, want none", got)
	}
	if len(p.connect) != 2 || p.connect[0].network != "net-b" || p.connect[1].network != "net-c" || len(p.connect[1].aliases) != 0 {
		t.Errorf("connections before start: %+v", p.connect)
	}
}

// A relay carries the names it is given, each once, on every network; a
// replica of the egg carries none of them, whatever its aliases.
func TestOnlyNetworkAliasesAreCarried(t *testing.T) {
	replica := fullSpec()
	relay := contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: "web.relay-1", Image: "hatch-relay:1",
		NetworkAliases: []string{"web", "shop-web", "web"}, Networks: []string{"net-a", "net-b"}}
	for _, tc := range []struct {
		w    contract.WorkloadSpec
		want []string
	}{{replica, nil}, {relay, []string{"web", "shop-web"}}} {
		p := planCreate(containers.StartRequest{HostID: "h1", Spec: tc.w}, "img", "c", nil, nil)
		if got := p.network.EndpointsConfig[tc.w.Networks[0]].Aliases; !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s on %s: aliases %v, want %v", tc.w.Egg, tc.w.Networks[0], got, tc.want)
		}
		if got := p.connect[0].aliases; !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s on %s: aliases %v, want %v", tc.w.Egg, p.connect[0].network, got, tc.want)
		}
	}
}

func TestSecretHandlesInEnvBecomeTheirValues(t *testing.T) {
	w := contract.WorkloadSpec{Namespace: "n", Project: "p", Egg: "e", Image: "i",
		Env: map[string]string{
			"API_KEY": "hatch-secret:api_key:1:fp1",
			"DSN":     "postgres://app:hatch-secret:db_pw:2:fp2@db/shop",
			"PLAIN":   "hatch-secret-ish",
		},
		Secrets: []contract.SecretFile{
			{Name: "api_key", Handle: "hatch-secret:api_key:1:fp1", Value: "k3y"},
			{Name: "db_pw", Handle: "hatch-secret:db_pw:2:fp2", Value: "pw"},
		},
	}
	p := planCreate(containers.StartRequest{HostID: "h1", Spec: w}, "i", "name", nil, nil)
	want := []string{"API_KEY=k3y", "DSN=postgres://app:pw@db/shop", "PLAIN=hatch-secret-ish"}
	if !reflect.DeepEqual(p.config.Env, want) {
		t.Fatalf("env %q, want %q", p.config.Env, want)
	}
}

func TestPlanCreateOfAMinimalSpecLeavesDockerDefaults(t *testing.T) {
	req := containers.StartRequest{HostID: "h1", Spec: contract.WorkloadSpec{Namespace: "n", Project: "p", Egg: "e", Image: "i"}}
	p := planCreate(req, "i", "name", nil, nil)
	if p.network != nil || p.host.NetworkMode != "" || len(p.connect) != 0 {
		t.Errorf("networks without any asked: %+v %q %v", p.network, p.host.NetworkMode, p.connect)
	}
	if p.config.Healthcheck != nil {
		t.Error("a healthcheck without a cmd: the image's own must stay")
	}
	if p.host.PidsLimit != nil || p.host.Tmpfs != nil || p.host.Mounts != nil || p.config.Env != nil {
		t.Errorf("limits or mounts without any asked: %+v", p.host)
	}
	if *p.config.StopTimeout != 10 {
		t.Errorf("default stop timeout %d, want 10", *p.config.StopTimeout)
	}
}

func TestDockerHealthcheckKeepsAnExplicitMarker(t *testing.T) {
	for _, cmd := range [][]string{{"CMD-SHELL", "curl x"}, {"NONE"}, {"CMD", "/a"}} {
		if got := dockerHealthcheck(contract.HealthCheck{Cmd: cmd}); !reflect.DeepEqual(got.Test, cmd) {
			t.Errorf("%v became %v", cmd, got.Test)
		}
	}
}

func TestImageRefNamesBlobBuildsByDigestAndSettings(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	plain, err := ImageRef(contract.WorkloadSpec{BlobID: digest})
	if err != nil || !strings.HasPrefix(plain, "hatch-blob:"+strings.Repeat("ab", 32)+"-") {
		t.Fatalf("blob ref %q %v", plain, err)
	}
	again, _ := ImageRef(contract.WorkloadSpec{BlobID: digest, Egg: "other"})
	if again != plain {
		t.Error("the same blob built the same way got two tags: it would be built twice")
	}
	target, _ := ImageRef(contract.WorkloadSpec{BlobID: digest, Build: &contract.BuildSpec{Target: "app"}})
	if target == plain {
		t.Error("a blob built with another target shares the tag of the default build")
	}
	if len(target) > len("hatch-blob:")+128 {
		t.Errorf("tag too long for Docker: %q", target)
	}
	if ref, _ := ImageRef(contract.WorkloadSpec{Image: "nginx:1.27", BlobID: digest}); ref != "nginx:1.27" {
		t.Errorf("image reference: %q", ref)
	}
	for _, bad := range []string{"sha256:abc", "md5:" + strings.Repeat("a", 64), ""} {
		if _, err := ImageRef(contract.WorkloadSpec{BlobID: bad}); err == nil {
			t.Errorf("blob %q accepted", bad)
		}
	}
}

type blobMap map[string][]byte

func (b blobMap) OpenBlob(_ context.Context, digest string) (io.ReadCloser, error) {
	data, ok := b[digest]
	if !ok {
		return nil, errors.New("no such blob")
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

func TestFetchBlobVerifiesTheDigest(t *testing.T) {
	content := []byte("a build context")
	sum := sha256.Sum256(content)
	good := "sha256:" + hex.EncodeToString(sum[:])
	lying := "sha256:" + strings.Repeat("0", 64)
	e := &Engine{cfg: Config{Blobs: blobMap{good: content, lying: content}}}

	f, err := e.fetchBlob(context.Background(), good)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(f)
	f.Close()
	os.Remove(f.Name())
	if !bytes.Equal(got, content) {
		t.Fatalf("fetched %q", got)
	}
	if _, err := e.fetchBlob(context.Background(), lying); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("a blob not matching its digest: %v", err)
	}
	if _, err := e.fetchBlob(context.Background(), "sha256:"+strings.Repeat("1", 64)); err == nil {
		t.Fatal("a missing blob was fetched")
	}
}

func TestFollowProgressReturnsTheStreamsError(t *testing.T) {
	ok := `{"status":"Pulling fs layer"}` + "\n" + `{"status":"Downloading","progressDetail":{"current":1,"total":2}}`
	if err := followProgress(strings.NewReader(ok), zap.NewNop(), "x"); err != nil {
		t.Fatalf("clean stream: %v", err)
	}
	bad := `{"stream":"Step 1/2"}` + "\n" + `{"errorDetail":{"message":"COPY failed"},"error":"COPY failed"}`
	if err := followProgress(strings.NewReader(bad), zap.NewNop(), "x"); err == nil || !strings.Contains(err.Error(), "COPY failed") {
		t.Fatalf("failed build: %v", err)
	}
}

func TestSecretsAreOwnerReadOnlyAndRemoved(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets")
	s := secretStore{dir: dir}
	if err := s.init(); err != nil {
		t.Fatal(err)
	}
	paths, err := s.write("ctr", []contract.SecretFile{{Name: "a", Value: "one"}, {Name: "b", Value: "two"}}, "1234:5678")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"a": "one", "b": "two"} {
		st, err := os.Stat(paths[name])
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o400 {
			t.Errorf("%s: mode %v, want 0400", name, st.Mode().Perm())
		}
		if os.Geteuid() == 0 {
			sys := st.Sys().(*syscall.Stat_t)
			if sys.Uid != 1234 || sys.Gid != 5678 {
				t.Errorf("%s: owner %d:%d, want the container's user 1234:5678", name, sys.Uid, sys.Gid)
			}
		}
		if b, _ := os.ReadFile(paths[name]); string(b) != want {
			t.Errorf("%s holds %q", name, b)
		}
	}
	if st, _ := os.Stat(filepath.Join(dir, "ctr")); st.Mode().Perm() != 0o700 {
		t.Errorf("container directory mode %v", st.Mode().Perm())
	}
	// A retried start rewrites the (read-only) files.
	if _, err := s.write("ctr", []contract.SecretFile{{Name: "a", Value: "new"}}, ""); err != nil {
		t.Fatalf("rewrite: %v", err)
	}
	if b, _ := os.ReadFile(paths["a"]); string(b) != "new" {
		t.Errorf("rewritten secret holds %q", b)
	}
	if err := s.remove("ctr"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ctr")); !os.IsNotExist(err) {
		t.Error("secrets left after remove")
	}
	for _, bad := range []string{"../x", "a/b", "", ".."} {
		if _, err := s.write("ctr2", []contract.SecretFile{{Name: bad, Value: "v"}}, ""); err == nil {
			t.Errorf("secret name %q accepted", bad)
		}
	}
}

func TestNumericUser(t *testing.T) {
	tests := []struct {
		user     string
		uid, gid int
		ok       bool
	}{
		{"", 0, 0, false}, {"app", 0, 0, false}, {"1000", 1000, -1, true}, {"1000:50", 1000, 50, true}, {"1000:staff", 1000, -1, true},
	}
	for _, tt := range tests {
		uid, gid, ok := numericUser(tt.user)
		if uid != tt.uid || gid != tt.gid || ok != tt.ok {
			t.Errorf("%q: %d %d %v", tt.user, uid, gid, ok)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	good := testConfig(t, "h1")
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		mutate func(*Config)
		want   string
	}{
		"no host":               {func(c *Config) { c.HostID = "" }, "no host ID"},
		"no secret dir":         {func(c *Config) { c.SecretDir = "" }, "no secret directory"},
		"no call timeout":       {func(c *Config) { c.CallTimeout = 0 }, "timeouts"},
		"no probe concurrency":  {func(c *Config) { c.ProbeConcurrency = 0 }, "probe concurrency"},
		"a forged owner label":  {func(c *Config) { c.Labels = map[string]string{containers.LabelHost: "h2"} }, "Hatchery's own"},
		"a forged managed flag": {func(c *Config) { c.Labels = map[string]string{containers.LabelManaged: "true"} }, "Hatchery's own"},
		"no blob source":        {func(c *Config) { c.Blobs = nil }, "no blob source"},
		"no ingress":            {func(c *Config) { c.Ingress = nil }, "no ingress"},
		"no change callback":    {func(c *Config) { c.OnChange = nil }, "no change callback"},
		"no logger":             {func(c *Config) { c.Logger = nil }, "no logger"},
	}
	for name, tt := range tests {
		c := testConfig(t, "h1")
		tt.mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, tt.want)
		}
	}
	// A config missing every dependency names them all at once.
	bare := DefaultConfig("h1")
	err := bare.Validate()
	for _, want := range []string{"Blobs", "Ingress", "OnChange", "Logger"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("DefaultConfig without dependencies: %v, want it to name %s", err, want)
		}
	}
}

// The agent hands its ingress to the Engine as it is.
var _ Ingress = (*ingress.Ingress)(nil)

func TestATerminalsRunIsMadeAsDockerRunItAndLabelledWithItsNetworks(t *testing.T) {
	w := contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: "web", Image: "web:1", Networks: []string{"net-b", "net-a"}}
	p := planCreate(containers.StartRequest{HostID: "h1", Spec: w}, "img", "c", map[string]string{}, nil)
	withTerminal(p)
	c := p.config
	if !c.Tty || !c.OpenStdin || !c.StdinOnce || !c.AttachStdin || !c.AttachStdout || !c.AttachStderr {
		t.Errorf("config %+v: want a terminal, stdin open once, attached", c)
	}
	if got := c.Labels[containers.LabelNetworks]; got != "net-a,net-b" {
		t.Errorf("networks label %q, want net-a,net-b", got)
	}
}
