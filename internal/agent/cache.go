package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/fsutil"
	"github.com/hatchery/hatchery/internal/seal"
)

// Cache keeps the last desired state on disk, so that an agent restarted
// while the control plane is unreachable still converges. It is written
// atomically with mode 0600, and every secret value in it is sealed
// (AES-GCM) with a key kept in its own file beside it: the cache file alone
// reveals no secret.
type Cache struct {
	path string
	box  *seal.Box
}

// cachedState is the file's format: the desired state with sealed secret
// values, and when it was written. Format is bumped if the layout ever
// changes.
type cachedState struct {
	Format int                   `json:"format"`
	State  contract.DesiredState `json:"state"`
	// Written is the agent's clock at the write (absent in files of older
	// agents: the file's modification time stands in).
	Written time.Time `json:"written,omitzero"`
	// Generation is the state's generation (see containers.StateStamp);
	// zero in files of older agents.
	Generation int64 `json:"generation,omitempty"`
}

// Cached is a desired state read back from the cache, with the time it was
// written: a container created after it may be newer than the state.
type Cached struct {
	State   contract.DesiredState
	Written time.Time
	// Generation orders the state among those the agent converged to: a
	// container stamped with a later one is newer than this cache.
	Generation int64
}

const cacheFormat = 1

// OpenCache returns the cache kept in dataDir, creating its seal key if
// there is none yet.
func OpenCache(dataDir string) (*Cache, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	box, err := seal.LoadOrCreate(filepath.Join(dataDir, sealKeyFile))
	if err != nil {
		return nil, fmt.Errorf("desired-state cache: %w", err)
	}
	return &Cache{path: filepath.Join(dataDir, cacheFile), box: box}, nil
}

// Save writes d, its secret values sealed, replacing the previous state
// atomically, and records written as the time of the write and generation
// as the state's (see containers.StateStamp). d is not modified.
func (c *Cache) Save(d contract.DesiredState, written time.Time, generation int64) error {
	sealed := withSecrets(d, func(v contract.SecretValue) (contract.SecretValue, error) {
		return contract.SecretValue(c.box.Seal([]byte(v))), nil
	})
	data, err := json.Marshal(cachedState{Format: cacheFormat, State: sealed.state, Written: written, Generation: generation})
	if err != nil {
		return fmt.Errorf("encode desired-state cache: %w", err)
	}
	if err := fsutil.WriteFileAtomic(c.path, data, 0o600); err != nil {
		return fmt.Errorf("write desired-state cache: %w", err)
	}
	return nil
}

// Load reads the cached state. A missing file is not an error: ok is false
// (a fresh agent that has never heard from the control plane).
func (c *Cache) Load() (cached Cached, ok bool, err error) {
	data, err := os.ReadFile(c.path)
	if errors.Is(err, fs.ErrNotExist) {
		return Cached{}, false, nil
	}
	if err != nil {
		return Cached{}, false, fmt.Errorf("read desired-state cache: %w", err)
	}
	var cs cachedState
	if err := json.Unmarshal(data, &cs); err != nil {
		return Cached{}, false, fmt.Errorf("desired-state cache %s: %w", c.path, err)
	}
	if cs.Format != cacheFormat {
		return Cached{}, false, fmt.Errorf("desired-state cache %s: format %d, want %d", c.path, cs.Format, cacheFormat)
	}
	if cs.Written.IsZero() {
		if info, err := os.Stat(c.path); err == nil {
			cs.Written = info.ModTime()
		}
	}
	opened := withSecrets(cs.State, func(v contract.SecretValue) (contract.SecretValue, error) {
		plain, err := c.box.Open(string(v))
		return contract.SecretValue(plain), err
	})
	if opened.err != nil {
		return Cached{}, false, fmt.Errorf("desired-state cache %s: %w", c.path, opened.err)
	}
	return Cached{State: opened.state, Written: cs.Written, Generation: cs.Generation}, true, nil
}

type transformed struct {
	state contract.DesiredState
	err   error
}

// withSecrets returns a copy of d whose secret values went through fn, the
// first error fn returned, and d itself untouched (its secret slices are
// cloned before they are written to).
func withSecrets(d contract.DesiredState, fn func(contract.SecretValue) (contract.SecretValue, error)) transformed {
	out := d
	out.Workloads = slices.Clone(d.Workloads)
	var firstErr error
	keep := func(err error) {
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	for i := range out.Workloads {
		keep(workloadSecrets(&out.Workloads[i], fn))
	}
	out.Runs = slices.Clone(d.Runs)
	for i := range out.Runs {
		keep(workloadSecrets(&out.Runs[i].Workload, fn))
	}
	out.Certificates = slices.Clone(d.Certificates)
	for i := range out.Certificates {
		c := &out.Certificates[i]
		if c.Key == "" {
			continue
		}
		v, err := fn(c.Key)
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("key of the certificate of %s: %w", c.Host, err)
		}
		c.Key = v
	}
	out.Challenges = slices.Clone(d.Challenges)
	for i := range out.Challenges {
		c := &out.Challenges[i]
		if c.ALPNKey == "" {
			continue
		}
		v, err := fn(c.ALPNKey)
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("key of the ACME challenge of %s: %w", c.Host, err)
		}
		c.ALPNKey = v
	}
	return transformed{state: out, err: firstErr}
}

// workloadSecrets passes w's secret values and registry password through
// fn, in copies of its slices, and returns fn's first error.
func workloadSecrets(w *contract.WorkloadSpec, fn func(contract.SecretValue) (contract.SecretValue, error)) error {
	var firstErr error
	if a := w.PullAuth; a != nil && a.Password != "" {
		c := *a
		v, err := fn(a.Password)
		if err != nil {
			firstErr = fmt.Errorf("password of registry %s for %s: %w", a.Registry, w.ID(), err)
		}
		c.Password = v
		w.PullAuth = &c
	}
	if len(w.Secrets) == 0 {
		return firstErr
	}
	w.Secrets = slices.Clone(w.Secrets)
	for j := range w.Secrets {
		v, err := fn(w.Secrets[j].Value)
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("secret %s of %s: %w", w.Secrets[j].Name, w.ID(), err)
		}
		w.Secrets[j].Value = v
	}
	return firstErr
}
