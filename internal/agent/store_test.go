package agent

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/converge"
)

func TestCacheRoundTripsWithSecretsSealed(t *testing.T) {
	dir := t.TempDir()
	c, err := OpenCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := c.Load(); ok || err != nil {
		t.Fatalf("empty cache: ok %v err %v, want a fresh start", ok, err)
	}
	w := web(1)
	w.Secrets = []contract.SecretFile{{Name: "db", Handle: "h-db", Value: "correct horse"}, {Name: "api", Handle: "h-api", Value: "battery staple"}}
	w.PullAuth = &contract.RegistryAuth{Registry: "ghcr.io", Username: "ci", Handle: "h-reg", Password: "registry pass"}
	d := desiredState(w, web(2))
	d.Workloads[1].Egg = "api"
	d.Certificates = []contract.Certificate{{Host: "shop.example.com", Chain: "CHAIN", Key: "tls private key", Source: "acme"}}
	run := web(3)
	run.Egg = "migrate"
	run.Secrets = []contract.SecretFile{{Name: "db", Handle: "h-db", Value: "run secret"}}
	run.PullAuth = &contract.RegistryAuth{Registry: "ghcr.io", Username: "ci", Handle: "h-reg", Password: "run registry pass"}
	d.Runs = []contract.Run{{ID: "r1", Workload: run}}
	d.Seal()
	written := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	if err := c.Save(d, written, 0); err != nil {
		t.Fatal(err)
	}
	if d.Workloads[0].Secrets[0].Value != "correct horse" || d.Workloads[0].PullAuth.Password != "registry pass" {
		t.Error("Save changed the caller's state")
	}
	raw, err := os.ReadFile(filepath.Join(dir, cacheFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"correct horse", "battery staple", "tls private key", "registry pass", "run secret"} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("cache file holds %q in clear", secret)
		}
	}
	for _, f := range []string{cacheFile, sealKeyFile} {
		info, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", f, info.Mode().Perm())
		}
	}

	reopened, err := OpenCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, ok, err := reopened.Load()
	if err != nil || !ok {
		t.Fatalf("load: ok %v err %v", ok, err)
	}
	if !reflect.DeepEqual(got.State, d) {
		t.Errorf("loaded %+v\nwant %+v", got.State, d)
	}
	if !got.Written.Equal(written) {
		t.Errorf("written %v, want %v", got.Written, written)
	}
}

func TestACacheSealedWithAnotherKeyIsRefused(t *testing.T) {
	dir := t.TempDir()
	c, _ := OpenCache(dir)
	w := web(1)
	w.Secrets = []contract.SecretFile{{Name: "db", Handle: "h", Value: "v"}}
	if err := c.Save(desiredState(w), time.Now(), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, sealKeyFile)); err != nil {
		t.Fatal(err)
	}
	c2, err := OpenCache(dir) // a new key
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c2.Load(); err == nil || !strings.Contains(err.Error(), "secret db") {
		t.Errorf("load with another key: %v, want an error naming the secret", err)
	}
}

func TestIdentityIsKeptInTheDataDir(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := LoadIdentity(dir); ok || err != nil {
		t.Fatalf("no identity yet: ok %v err %v", ok, err)
	}
	id := Identity{Server: "https://cp:7700", HostID: "h-1", Name: "edge", Token: "hatch-host.s." + strings.Repeat("ab", 32), CAFingerprint: strings.Repeat("ab", 32)}
	if err := SaveIdentity(dir, id, []byte("-----BEGIN CERTIFICATE-----\n")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{identityFile, caFile} {
		info, err := os.Stat(filepath.Join(dir, f))
		if err != nil || info.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, mode %v; want 0600", f, err, info.Mode().Perm())
		}
	}
	got, ok, err := LoadIdentity(dir)
	if err != nil || !ok || !reflect.DeepEqual(got, id) {
		t.Errorf("loaded %+v (ok %v, err %v), want %+v", got, ok, err, id)
	}
	if err := SaveIdentity(dir, Identity{Server: "https://cp"}, nil); err == nil {
		t.Error("an incomplete identity was saved")
	}
}

func TestMemoryIsWrittenOnlyWhenItChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), stateFile)
	f := memoryFile{path: path}
	m, err := f.load()
	if err != nil {
		t.Fatal(err)
	}
	m.History.RecordFailure(converge.Failure{WorkloadID: "a/b/c", SpecHash: "h2", Reason: "not healthy"}, time.Unix(100, 0))
	m.FailureLogs["a/b/c"] = failureLog{SpecHash: "h2", Lines: []string{"boom"}}
	if err := f.save(m); err != nil {
		t.Fatal(err)
	}
	info1, _ := os.Stat(path)
	time.Sleep(10 * time.Millisecond)
	if err := f.save(m); err != nil {
		t.Fatal(err)
	}
	info2, _ := os.Stat(path)
	if !info2.ModTime().Equal(info1.ModTime()) {
		t.Error("an unchanged memory was written again")
	}

	g := memoryFile{path: path}
	back, err := g.load()
	if err != nil {
		t.Fatal(err)
	}
	if f := back.History.FailedRollouts["a/b/c"]; f.SpecHash != "h2" || back.FailureLogs["a/b/c"].Lines[0] != "boom" {
		t.Errorf("reloaded memory %+v", back)
	}
}

// Issue 26: a kill between the create and the rename of an atomic write
// leaves a temporary file as big as the state it stood for; on a small,
// full data dir those eat the space the next cache write needs. The next
// start sweeps them.
func TestPrepareDataDirSweepsTemporaryFilesOfKilledWrites(t *testing.T) {
	dir := t.TempDir()
	leftover := []string{".agent-state.json.tmp-2113977414", ".desired-state.json.tmp-8", ".host.pem.tmp-1"}
	kept := []string{stateFile, cacheFile, "relays"}
	for _, name := range append(slices.Clone(leftover), kept...) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := PrepareDataDir(dir, zaptest.NewLogger(t)); err != nil {
		t.Fatal(err)
	}
	for _, name := range leftover {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("%s left behind (%v)", name, err)
		}
	}
	for _, name := range kept {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
