package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/backup"
	"github.com/hatchery/hatchery/internal/contract"
)

// hookOutputLimit is how much of a failed hook's output a status carries:
// its end, where the reason usually is.
const hookOutputLimit = 4 << 10

// taskRunner does one volume task: a backup or a restore, through Docker's
// archive API and the task's store.
type taskRunner struct {
	docker volumeDocker
	store  backup.Store
	// image is the helper containers' (the agent's relay image).
	image    string
	spillDir string
	now      func() time.Time
	// pollEvery is how often a backup with consistency stop looks whether
	// the volume is still mounted by a running container.
	pollEvery time.Duration
	// set changes the task's status; notify asks for a status report now.
	set    func(func(*contract.VolumeTaskStatus))
	notify func()
	log    *zap.Logger
}

// phase says what the task does now, at once in a report.
func (r *taskRunner) phase(state contract.TaskState, phase string) {
	r.set(func(st *contract.VolumeTaskStatus) { st.State, st.Phase = state, phase })
	if r.notify != nil {
		r.notify()
	}
}

func (r *taskRunner) run(ctx context.Context, t contract.VolumeTask) error {
	key, err := taskKey(t)
	if err != nil {
		return err
	}
	if t.Kind == contract.TaskRestore {
		return r.restore(ctx, t, key)
	}
	return r.backup(ctx, t, key)
}

// backup runs Before in the egg's running container, copies the volume if
// it succeeded, then runs After (whenever Before ran, or when there is
// none). With consistency stop it first waits until no running container
// mounts the volume.
func (r *taskRunner) backup(ctx context.Context, t contract.VolumeTask, key backup.VolumeKey) error {
	vol := t.Volume.DockerName
	if t.Consistency == contract.ConsistencyStop {
		if err := r.waitUnmounted(ctx, vol); err != nil {
			return err
		}
	}
	container := ""
	if len(t.Before)+len(t.After) > 0 {
		id, err := r.docker.EggContainer(ctx, t.Volume.Namespace, t.Volume.Project, t.Egg)
		if err != nil {
			return err
		}
		if id == "" {
			// Not running here: nothing writes the volume through the egg,
			// and there is nothing to run the hooks in.
			r.log.Info("the egg has no running container on this host: its before and after hooks are skipped", zap.String("egg", t.Egg))
		}
		container = id
	}
	var outputs []string
	var errs []error
	copyIt := true
	if container != "" && len(t.Before) > 0 {
		r.phase(contract.TaskRunning, "before")
		out, err := r.hook(ctx, container, t.Before)
		if err != nil {
			outputs = append(outputs, out)
			errs = append(errs, fmt.Errorf("before %q failed, so the volume was not copied: %w", strings.Join(t.Before, " "), err))
			copyIt = false
		}
	}
	var manifest backup.Manifest
	var stats backup.Stats
	if copyIt {
		r.phase(contract.TaskRunning, "copy")
		var err error
		manifest, stats, err = r.copyOut(ctx, vol, key)
		if err != nil {
			errs = append(errs, err)
		}
	}
	if container != "" && len(t.After) > 0 {
		r.phase(contract.TaskRunning, "after")
		// After runs even when the task was abandoned: a Before that
		// paused the egg must be undone.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
		out, err := r.hook(actx, container, t.After)
		cancel()
		if err != nil {
			outputs = append(outputs, out)
			what := "the copy did not complete"
			if manifest.ID != "" {
				what = "the copy completed (backup " + manifest.ID + ") but is not reported good"
			}
			errs = append(errs, fmt.Errorf("after %q failed, which fails the backup (%s): %w", strings.Join(t.After, " "), what, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		if len(outputs) > 0 {
			r.set(func(st *contract.VolumeTaskStatus) {
				st.Output = lastBytes(strings.Join(outputs, "\n"), hookOutputLimit)
			})
		}
		return err
	}
	r.set(func(st *contract.VolumeTaskStatus) {
		st.Manifest = manifest.ID
		st.Bytes, st.Chunks, st.NewChunks = stats.Bytes, stats.Chunks, stats.NewChunks
		st.SentBytes, st.StoredBytes = stats.SentBytes, stats.StoredBytes
	})
	return nil
}

// waitUnmounted waits until no running container mounts the volume: the
// control plane has taken the egg out of the desired state for the copy.
func (r *taskRunner) waitUnmounted(ctx context.Context, vol string) error {
	logged := false
	for {
		users, err := r.docker.VolumeUsers(ctx, vol, true)
		if err != nil {
			return err
		}
		if len(users) == 0 {
			return nil
		}
		if !logged {
			r.phase(contract.TaskPending, "waiting for the egg to stop")
			r.log.Info("waiting for the volume's containers to stop before the copy", zap.Strings("containers", users))
			logged = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to stop: %w", strings.Join(users, ", "), ctx.Err())
		case <-time.After(r.pollEvery):
		}
	}
}

// hook runs a hook in the container; a non-zero exit is an error. It
// returns the end of the hook's output.
func (r *taskRunner) hook(ctx context.Context, container string, cmd []string) (string, error) {
	out := &tailBuffer{limit: hookOutputLimit}
	code, err := r.docker.Exec(ctx, container, cmd, out)
	if err != nil {
		return out.String(), err
	}
	if code != 0 {
		return out.String(), fmt.Errorf("exit code %d", code)
	}
	return out.String(), nil
}

// copyOut backs the volume's tar stream up into the task's store.
func (r *taskRunner) copyOut(ctx context.Context, vol string, key backup.VolumeKey) (backup.Manifest, backup.Stats, error) {
	var m backup.Manifest
	var st backup.Stats
	err := r.docker.ReadVolume(ctx, r.image, vol, func(tarStream io.Reader) error {
		var err error
		m, st, err = backup.Backup(ctx, &countingReader{r: tarStream, progress: r.progress}, key, r.store, r.now())
		return err
	})
	return m, st, err
}

// progress records the bytes of the stream so far.
func (r *taskRunner) progress(n int64) {
	r.set(func(st *contract.VolumeTaskStatus) { st.Bytes = n })
}

// restore fetches the backup's manifest, then every chunk, verifying each
// into a spill file; only then (at the stream's first byte) does it
// replace the target volume and write the stream into it.
func (r *taskRunner) restore(ctx context.Context, t contract.VolumeTask, key backup.VolumeKey) error {
	r.phase(contract.TaskRunning, "fetch")
	m, err := backup.OpenManifest(ctx, r.store, t.Backup, key)
	if err != nil {
		return fmt.Errorf("restore backup %s: %w", t.Backup, err)
	}
	if err := ensureSpillDir(r.spillDir); err != nil {
		return err
	}
	w := &volumeWriter{ctx: ctx, r: r, t: t}
	err = backup.Restore(ctx, m, key, r.store, w, r.spillDir)
	if err := w.finish(err); err != nil {
		return err
	}
	r.set(func(st *contract.VolumeTaskStatus) { st.Manifest, st.Bytes, st.Chunks = m.ID, m.Size, len(m.Chunks) })
	return nil
}

// volumeWriter is the restore's writer: at the first byte (every chunk is
// verified by then) it checks that no container uses the target volume,
// recreates it and starts writing the stream into it.
type volumeWriter struct {
	ctx     context.Context
	r       *taskRunner
	t       contract.VolumeTask
	pw      *io.PipeWriter
	done    chan error
	written int64
}

func (w *volumeWriter) start() error {
	r, t := w.r, w.t
	r.phase(contract.TaskRunning, "write")
	users, err := r.docker.VolumeUsers(w.ctx, t.Target, false)
	if err != nil {
		return err
	}
	if len(users) > 0 {
		return fmt.Errorf("volume %s is used by container(s) %s: the restore replaces it only once no container, running or not, mounts it", t.Target, strings.Join(users, ", "))
	}
	if err := r.docker.RecreateVolume(w.ctx, t.Target, t.Volume.Namespace, t.Volume.Project, t.Labels); err != nil {
		return err
	}
	pr, pw := io.Pipe()
	w.pw, w.done = pw, make(chan error, 1)
	go func() {
		err := r.docker.WriteVolume(w.ctx, r.image, t.Target, pr)
		if err == nil {
			// Docker read the whole archive it needed; anything after
			// its end is not the stream's (a tar ends with zero blocks).
			_, _ = io.Copy(io.Discard, pr)
		}
		pr.CloseWithError(cmpErr(err, io.ErrClosedPipe))
		w.done <- err
	}()
	return nil
}

func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

func (w *volumeWriter) Write(p []byte) (int, error) {
	if w.pw == nil {
		if err := w.start(); err != nil {
			return 0, err
		}
	}
	n, err := w.pw.Write(p)
	w.written += int64(n)
	w.r.progress(w.written)
	return n, err
}

// finish ends the write with the restore's outcome and returns the task's
// error. A stream of no bytes still recreates the volume, empty.
func (w *volumeWriter) finish(restoreErr error) error {
	if w.pw == nil {
		if restoreErr != nil {
			return restoreErr
		}
		if err := w.start(); err != nil {
			return err
		}
	}
	if restoreErr != nil {
		w.pw.CloseWithError(restoreErr)
		<-w.done
		return restoreErr
	}
	w.pw.Close()
	return <-w.done
}

// countingReader counts what is read through it.
type countingReader struct {
	r        io.Reader
	n        atomic.Int64
	progress func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.progress(c.n.Add(int64(n)))
	return n, err
}

// tailBuffer keeps the last limit bytes written to it.
type tailBuffer struct {
	limit int
	buf   []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.limit; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string { return string(b.buf) }

// lastBytes returns the end of s, at most limit bytes.
func lastBytes(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	return s[len(s)-limit:]
}
