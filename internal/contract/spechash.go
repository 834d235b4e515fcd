package contract

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"sync"
)

// SpecHash returns the hash of everything in the workload that goes into its
// containers' configuration, so that a container labelled with a different hash
// needs replacing. It is the one definition of "needs a new container":
//
//   - in: identity, image (pinned to its digest with the default pull
//     policy, so a moved tag rolls) or Blob and build settings, revision, command,
//     entrypoint, user, working directory, env values, network aliases and
//     networks,
//     mounts (volumes, binds, secret handles, tmpfs), read-only, capabilities,
//     labels, resource limits, stop signal and timeout, and a Docker
//     HEALTHCHECK (a Cmd health check, with its timings);
//   - out: replicas (scaling rolls nothing), port, published ports and routes
//     (served by the agent's proxy), the egg's aliases and the eggs it uses
//     (served by relays), agent-side probes (HTTP, TCP) and their
//     timings, the restart policy (applied by the agent), the pull policy
//     (when the agent pulls, not what it runs), the rollout settings,
//     and secret values (their handle is in).
//
// TestSpecHashFields lists every field and says in or out.
func SpecHash(w WorkloadSpec) string {
	bp := encoderBuffers.Get().(*[]byte)
	e := specEncoder{b: (*bp)[:0]}
	defer func() { *bp = e.b; encoderBuffers.Put(bp) }()
	e.str(1, w.Namespace)
	e.str(2, w.Project)
	e.str(3, w.Egg)
	e.str(4, w.BlobID)
	e.str(5, w.Image)
	if b := w.Build; b != nil {
		e.str(6, b.Dockerfile)
		e.dict(7, b.Args)
		e.str(8, b.Target)
	}
	e.int(9, int64(w.Revision))
	e.list(10, w.Command)
	e.list(11, w.Entrypoint)
	e.str(12, w.User)
	e.str(13, w.WorkingDir)
	e.dict(14, w.Env)
	if h := w.Health; len(h.Cmd) > 0 {
		e.list(16, h.Cmd)
		e.int(17, int64(h.Interval))
		e.int(18, int64(h.Timeout))
		e.int(19, int64(h.StartPeriod))
		e.int(20, int64(h.Retries))
	}
	for _, v := range w.Volumes {
		e.str(21, v.Name)
		e.str(22, v.DockerName)
		e.str(23, v.Target)
		e.bool(24, v.ReadOnly)
	}
	for _, b := range w.Binds {
		e.str(25, b.Source)
		e.str(26, b.Target)
		e.bool(27, b.ReadOnly)
	}
	for _, s := range w.Secrets {
		e.str(28, s.Name)
		e.str(29, s.Handle)
	}
	e.list(30, w.Tmpfs)
	e.bool(31, w.ReadOnly)
	e.list(32, w.CapAdd)
	e.list(33, w.CapDrop)
	e.dict(34, w.Labels)
	// Tags 15 (aliases) and 35 (networks) were used while an egg's
	// containers carried its name and aliases on their networks; its relays
	// carry them now. Networks moved to a new tag, so that every container
	// made then is stale once, and its replacement carries no name.
	e.list(41, w.NetworkAliases)
	e.list(42, w.Networks)
	e.int(36, w.Resources.MemoryBytes)
	e.int(37, w.Resources.NanoCPUs)
	e.int(38, w.Resources.PIDs)
	e.str(39, w.StopSignal)
	e.int(40, int64(w.StopTimeout))
	sum := sha256.Sum256(e.b)
	return hex.EncodeToString(sum[:8])
}

// encoderBuffers recycles SpecHash's encoding buffers: Diff hashes every
// workload on every converge.
var encoderBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// specEncoder feeds fields to a hash unambiguously: each as a tag, then its
// length-prefixed value. Every element of a list or struct-list starts with its
// field's tag, so list boundaries count too. Zero values are skipped, so that
// a nil and an empty list hash alike and a field added later with its zero
// value does not change the hash of existing specs. (It is several times
// faster than hashing JSON, which matters to Diff on thousands of workloads.)
type specEncoder struct {
	b []byte // the encoding so far, hashed at the end
}

func (e *specEncoder) head(tag byte, n uint64) {
	e.b = binary.AppendUvarint(append(e.b, tag), n)
}

func (e *specEncoder) str(tag byte, s string) {
	if s == "" {
		return
	}
	e.head(tag, uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *specEncoder) int(tag byte, n int64) {
	if n != 0 {
		e.head(tag, uint64(n))
	}
}

func (e *specEncoder) bool(tag byte, b bool) {
	if b {
		e.head(tag, 1)
	}
}

func (e *specEncoder) list(tag byte, l []string) {
	if len(l) == 0 {
		return
	}
	e.head(tag, uint64(len(l)))
	for _, s := range l {
		e.head(0, uint64(len(s)))
		e.b = append(e.b, s...)
	}
}

func (e *specEncoder) dict(tag byte, m map[string]string) {
	if len(m) == 0 {
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	e.head(tag, uint64(len(keys)))
	for _, k := range keys {
		e.head(0, uint64(len(k)))
		e.b = append(e.b, k...)
		e.head(0, uint64(len(m[k])))
		e.b = append(e.b, m[k]...)
	}
}
