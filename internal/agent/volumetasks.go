package agent

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/backup"
	"github.com/hatchery/hatchery/internal/contract"
)

// Volume tasks (contract.VolumeTask) are the backups and restores of the
// desired state. The agent begins each task ID at most once, ever: it
// records the task as running in its memory (saved to disk) before it
// begins it, so a task found running in the memory of a new agent process
// was cut short by a restart and is reported failed, never begun again and
// never reported done. A backup is good only once the control plane has
// its manifest, which the engine writes last; a backup cut short leaves
// chunks only, which the control plane's collection removes.
//
// A task runs on a goroutine of its own (taskExecutor), not in the
// converge: a copy may take hours. A task that leaves the desired state is
// abandoned (its context cancelled); one that ended is reported until it
// leaves the desired state.

// volumeDocker is what volume tasks need of Docker (the real adapter has it;
// see docker.Engine's archive.go).
type volumeDocker interface {
	// ReadVolume streams the volume's tar through a never-started helper.
	ReadVolume(ctx context.Context, image, name string, read func(io.Reader) error) error
	// WriteVolume writes a tar stream ReadVolume made into the volume.
	WriteVolume(ctx context.Context, image, name string, tarStream io.Reader) error
	// VolumeUsers names the containers mounting the volume.
	VolumeUsers(ctx context.Context, name string, runningOnly bool) ([]string, error)
	// RecreateVolume removes the volume if it exists and creates it empty.
	RecreateVolume(ctx context.Context, name, namespace, project string, labels map[string]string) error
	// RemoveVolumeHelpers removes the helpers an earlier agent left.
	RemoveVolumeHelpers(ctx context.Context) error
	// EggContainer returns a running replica of the egg ("" if none).
	EggContainer(ctx context.Context, namespace, project, egg string) (string, error)
	// Exec runs cmd in a running container, its output to out.
	Exec(ctx context.Context, containerID string, cmd []string, out io.Writer) (int, error)
}

// taskStores makes the backup.Store of one task of this host (HTTPClient
// is one).
type taskStores interface {
	TaskStore(taskID string) backup.Store
}

// restoresDir, under the data directory, holds the spill files of
// restores: every chunk is fetched and verified there before the volume is
// touched.
const restoresDir = "restores"

// restartedDuring is the error of a task an earlier agent process began.
const restartedDuring = "the agent restarted during it; it is not begun again"

// taskInput is what planVolumeTasks decides from.
type taskInput struct {
	tasks []contract.VolumeTask
	// records are the memory's tasks, by ID: every task ever begun that is
	// still in the desired state, with its last status.
	records map[string]contract.VolumeTaskStatus
	// live are the tasks this process began, by ID, with their status now.
	live map[string]contract.VolumeTaskStatus
	// begun are the IDs this process ever began, live or long gone.
	begun map[string]bool
	// unable, if set, is why this agent cannot do any task (its Docker or
	// control-plane client lacks the calls).
	unable string
	noExec bool
	// hold begins and abandons nothing: the desired state is the cache's.
	hold bool
	now  time.Time
}

// taskPlan is what planVolumeTasks decides.
type taskPlan struct {
	statuses []contract.VolumeTaskStatus
	records  map[string]contract.VolumeTaskStatus
	begins   []contract.VolumeTask
	abandons []string
	errors   []string
}

// planVolumeTasks decides, for each task of the desired state, whether to
// begin it and how it stands; and which tasks in progress to abandon. Pure.
func planVolumeTasks(in taskInput) taskPlan {
	p := taskPlan{records: map[string]contract.VolumeTaskStatus{}}
	wanted := map[string]bool{}
	for _, t := range in.tasks {
		if wanted[t.ID] {
			continue // a duplicate entry: the first one wins
		}
		wanted[t.ID] = true
		var st contract.VolumeTaskStatus
		live, isLive := in.live[t.ID]
		rec, known := in.records[t.ID]
		switch {
		case isLive:
			st = live
			p.records[t.ID] = live
		case known && rec.State.Ended():
			st = rec
			p.records[t.ID] = rec
		case known:
			// Begun by an earlier process, which ended before the task did.
			st = rec
			st.State, st.Phase, st.Error, st.EndedAt = contract.TaskFailed, "", restartedDuring, in.now
			p.records[t.ID] = st
		case in.begun[t.ID]:
			// Left the desired state and came back: never begun twice.
			st = contract.VolumeTaskStatus{ID: t.ID, State: contract.TaskFailed, EndedAt: in.now,
				Error: "this agent began it before, and a task is never begun twice"}
			p.records[t.ID] = st
		case in.hold:
			st = contract.VolumeTaskStatus{ID: t.ID, State: contract.TaskPending, Error: "waiting for the control plane to confirm the desired state"}
		default:
			st = contract.VolumeTaskStatus{ID: t.ID, State: contract.TaskPending, StartedAt: in.now}
			err := taskProblem(t, in.noExec)
			if err == nil && in.unable != "" {
				err = errors.New(in.unable)
			}
			if err != nil {
				st.State, st.Error, st.EndedAt = contract.TaskFailed, err.Error(), in.now
				p.errors = append(p.errors, fmt.Sprintf("volume task %s refused: %v", t.ID, err))
			} else {
				p.begins = append(p.begins, t)
			}
			p.records[t.ID] = st
		}
		p.statuses = append(p.statuses, st)
	}
	for id, st := range in.live {
		if !wanted[id] && !in.hold && !st.State.Ended() {
			p.abandons = append(p.abandons, id)
		}
	}
	if in.hold {
		// The cache may be older than the control plane's state, which may
		// still hold the task: what is known of it stays.
		for id, rec := range in.records {
			if !wanted[id] {
				p.records[id] = rec
			}
		}
	}
	return p
}

// taskProblem says why the agent refuses a task. Its fields go into Docker
// names and routes, and its key must be one.
func taskProblem(t contract.VolumeTask, noExec bool) error {
	if !contract.ValidNamePart(t.ID) {
		return errors.New("its ID must be letters, digits, '_', '.' or '-', not starting with '.' or '-'")
	}
	if _, err := taskKey(t); err != nil {
		return err
	}
	if !contract.ValidNamePart(t.Volume.DockerName) {
		return fmt.Errorf("volume %q: its Docker name %q is not a valid name", t.Volume.Name, t.Volume.DockerName)
	}
	switch t.Kind {
	case contract.TaskBackup:
		if t.Consistency != "" && t.Consistency != contract.ConsistencyHooks && t.Consistency != contract.ConsistencyStop {
			return fmt.Errorf("consistency %q: want %q or %q", t.Consistency, contract.ConsistencyHooks, contract.ConsistencyStop)
		}
		if len(t.Before)+len(t.After) > 0 {
			if noExec {
				return errors.New("this host's agent runs with --no-exec, which refuses the volume's before and after hooks")
			}
			if t.Egg == "" {
				return errors.New("it has before or after hooks but names no egg to run them in")
			}
		}
	case contract.TaskRestore:
		if !backup.ValidID(t.Backup) {
			return fmt.Errorf("backup %q: not a backup ID (64 lowercase hex digits)", t.Backup)
		}
		if !contract.ValidNamePart(t.Target) {
			return fmt.Errorf("target volume %q is not a valid Docker volume name", t.Target)
		}
	default:
		return fmt.Errorf("kind %q: want %q or %q", t.Kind, contract.TaskBackup, contract.TaskRestore)
	}
	return nil
}

// taskKey is the task's volume key.
func taskKey(t contract.VolumeTask) (backup.VolumeKey, error) {
	secret, err := hex.DecodeString(string(t.Key))
	if err != nil || len(secret) != backup.KeySize {
		return backup.VolumeKey{}, fmt.Errorf("its volume key is not %d hex digits", 2*backup.KeySize)
	}
	k, err := backup.NewVolumeKey(backup.VolumeID{Namespace: t.Volume.Namespace, Project: t.Volume.Project, Volume: t.Volume.Name}, secret)
	if err != nil {
		return backup.VolumeKey{}, fmt.Errorf("volume key: %w", err)
	}
	return k, nil
}

// taskExecutor runs the tasks this process began, each on a goroutine, and
// keeps their statuses. Safe for concurrent use.
type taskExecutor struct {
	log  *zap.Logger
	now  func() time.Time
	fire func() // asks for a converge (a task ended or changed phase)

	base context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu   sync.Mutex // guards live and begun
	live map[string]*liveTask
	// begun holds every task ID this process began.
	begun map[string]bool

	// swept is set once the helpers an earlier agent left are removed;
	// owned by the converge loop.
	swept bool
}

type liveTask struct {
	cancel context.CancelFunc
	status contract.VolumeTaskStatus
}

func newTaskExecutor(log *zap.Logger, now func() time.Time, fire func()) *taskExecutor {
	ctx, cancel := context.WithCancel(context.Background())
	return &taskExecutor{log: log, now: now, fire: fire, base: ctx, stop: cancel, live: map[string]*liveTask{}, begun: map[string]bool{}}
}

// begunIDs returns the IDs this process began.
func (x *taskExecutor) begunIDs() map[string]bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return maps.Clone(x.begun)
}

// snapshot returns the live tasks' statuses.
func (x *taskExecutor) snapshot() map[string]contract.VolumeTaskStatus {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make(map[string]contract.VolumeTaskStatus, len(x.live))
	for id, l := range x.live {
		out[id] = l.status
	}
	return out
}

// overlay puts the live tasks' statuses now into a report built earlier,
// so each heartbeat carries a task's progress.
func (x *taskExecutor) overlay(r *contract.StatusReport) {
	x.mu.Lock()
	defer x.mu.Unlock()
	// A copy: the report's slice is shared with the one the agent keeps.
	r.VolumeTasks = slices.Clone(r.VolumeTasks)
	for i, st := range r.VolumeTasks {
		if l, ok := x.live[st.ID]; ok {
			r.VolumeTasks[i] = l.status
		}
	}
}

// update changes a live task's status (a task abandoned is no longer).
func (x *taskExecutor) update(id string, fn func(*contract.VolumeTaskStatus)) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if l, ok := x.live[id]; ok {
		fn(&l.status)
	}
}

// begin runs do for task t on a goroutine of its own; do reports progress
// through its status function, and its error fails the task.
func (x *taskExecutor) begin(t contract.VolumeTask, do func(ctx context.Context, set func(func(*contract.VolumeTaskStatus))) error) {
	ctx, cancel := context.WithCancel(x.base)
	x.mu.Lock()
	x.begun[t.ID] = true
	x.live[t.ID] = &liveTask{cancel: cancel, status: contract.VolumeTaskStatus{ID: t.ID, State: contract.TaskRunning, StartedAt: x.now()}}
	x.mu.Unlock()
	log := x.log.With(zap.String("task", t.ID), zap.String("kind", string(t.Kind)), zap.String("volume", t.Volume.DockerName))
	if t.Kind == contract.TaskRestore {
		log = log.With(zap.String("backup", t.Backup), zap.String("target", t.Target))
	}
	log.Info("volume task begun")
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		defer cancel()
		set := func(fn func(*contract.VolumeTaskStatus)) { x.update(t.ID, fn) }
		err := runGuarded(func() error { return do(ctx, set) })
		set(func(st *contract.VolumeTaskStatus) {
			st.EndedAt, st.Phase = x.now(), ""
			if err != nil {
				st.State, st.Error = contract.TaskFailed, err.Error()
				return
			}
			st.State = contract.TaskDone
		})
		if err != nil {
			log.Warn("volume task failed", zap.Error(err))
		} else {
			log.Info("volume task done")
		}
		x.fire()
	}()
}

// runGuarded turns a panic of a task into its error: a task never ends the
// agent.
func runGuarded(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the task panicked: %v", r)
		}
	}()
	return fn()
}

// abandon cancels a task that left the desired state and forgets it.
func (x *taskExecutor) abandon(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if l, ok := x.live[id]; ok {
		l.cancel()
		delete(x.live, id)
		x.log.Info("volume task abandoned: it left the desired state", zap.String("task", id))
	}
}

// forgetEnded drops the ended tasks that are no longer wanted.
func (x *taskExecutor) forgetEnded(wanted map[string]bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for id, l := range x.live {
		if !wanted[id] && l.status.State.Ended() {
			delete(x.live, id)
		}
	}
}

// close cancels every task and waits for their goroutines (or ctx). A task
// cut short stays running in the memory: the next process reports it
// failed.
func (x *taskExecutor) close(ctx context.Context) error {
	x.stop()
	done := make(chan struct{})
	go func() { x.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("volume tasks: %w", ctx.Err())
	}
}

// handleVolumeTasks plans the volume tasks of the desired state, abandons
// those no longer in it, records the new ones as begun (saved before they
// begin: a restart must never begin one again) and begins them. It returns
// their statuses and the errors to report.
func (a *Agent) handleVolumeTasks(ctx context.Context, desired contract.DesiredState, hold bool, now time.Time) ([]contract.VolumeTaskStatus, []error) {
	vd, dockerOK := a.cfg.Docker.(volumeDocker)
	ts, storeOK := a.cfg.ControlPlane.(taskStores)
	unable := ""
	switch {
	case !dockerOK:
		unable = "this agent's Docker client cannot read or write volumes"
	case !storeOK:
		unable = "this agent's control-plane client has no backup store"
	}
	p := planVolumeTasks(taskInput{tasks: desired.VolumeTasks, records: a.mem.VolumeTasks, live: a.tasks.snapshot(),
		begun: a.tasks.begunIDs(), unable: unable, noExec: a.cfg.NoExec, hold: hold, now: now})
	var errs []error
	for _, e := range p.errors {
		errs = append(errs, errors.New(e))
	}
	for _, id := range p.abandons {
		a.tasks.abandon(id)
	}
	wanted := map[string]bool{}
	for _, t := range desired.VolumeTasks {
		wanted[t.ID] = true
	}
	if !hold {
		a.tasks.forgetEnded(wanted)
	}
	a.mem.VolumeTasks = p.records
	if len(p.begins) == 0 {
		return p.statuses, errs
	}
	if !a.tasks.swept {
		if err := vd.RemoveVolumeHelpers(ctx); err != nil {
			errs = append(errs, err)
		} else {
			a.tasks.swept = true
		}
	}
	for _, t := range p.begins {
		rec := a.mem.VolumeTasks[t.ID]
		rec.State = contract.TaskRunning
		a.mem.VolumeTasks[t.ID] = rec
	}
	if err := a.memFile.save(a.mem); err != nil {
		// Not recorded, so not begun: the next converge tries again.
		for _, t := range p.begins {
			delete(a.mem.VolumeTasks, t.ID)
		}
		for i, st := range p.statuses {
			if _, ok := a.mem.VolumeTasks[st.ID]; !ok && st.State == contract.TaskPending {
				p.statuses[i].Error = "not begun: its start could not be recorded: " + err.Error()
			}
		}
		return p.statuses, append(errs, fmt.Errorf("volume tasks not begun: %w", err))
	}
	spill := filepath.Join(a.cfg.DataDir, restoresDir)
	for _, t := range p.begins {
		r := &taskRunner{docker: vd, store: ts.TaskStore(t.ID), image: a.cfg.RelayImage, spillDir: spill,
			now: a.now, pollEvery: 2 * time.Second, notify: a.report.Fire, log: a.log.With(zap.String("task", t.ID))}
		a.tasks.begin(t, func(ctx context.Context, set func(func(*contract.VolumeTaskStatus))) error {
			r.set = set
			return r.run(ctx, t)
		})
	}
	return p.statuses, errs
}

// ensureSpillDir makes the restores' spill directory, readable by the
// agent alone (it holds a volume's plain content for a while).
func ensureSpillDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("restore spill directory: %w", err)
	}
	return nil
}
