package deploy

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/graph"
	"github.com/hatchery/hatchery/internal/provider"
	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

// Job is one apply as the service follows it: its progress, step by step,
// kept for followers while it runs and for a while after.
type Job struct {
	id      int64
	project string
	// actor is the admin token's name that applied: the apply's work,
	// which outlives the request, records it in its events.
	actor string

	mu      sync.Mutex // guards steps, changed, over
	steps   []api.Progress
	changed chan struct{} // closed and replaced at each step
	over    bool
}

func newJob(id int64, project, actor string) *Job {
	return &Job{id: id, project: project, actor: actor, changed: make(chan struct{})}
}

// ID is the apply's ID, as its record has it.
func (j *Job) ID() int64 { return j.id }

// add records a step and wakes the followers.
func (j *Job) add(p api.Progress) {
	j.mu.Lock()
	defer j.mu.Unlock()
	p.Seq = int64(len(j.steps) + 1)
	j.steps = append(j.steps, p)
	if p.Status == api.StatusFinished {
		j.over = true
	}
	close(j.changed)
	j.changed = make(chan struct{})
}

// Since returns the steps after seq, whether the apply is over (no step
// follows those), and a channel closed at the next step.
func (j *Job) Since(seq int64) ([]api.Progress, bool, <-chan struct{}) {
	j.mu.Lock()
	defer j.mu.Unlock()
	seq = min(max(seq, 0), int64(len(j.steps)))
	return append([]api.Progress(nil), j.steps[seq:]...), j.over, j.changed
}

// Apply starts the apply of a plan of the project and returns its job at
// once; the apply runs on the service's life. It refuses (with an
// *api.Error) a plan unknown, expired or of another project, a project
// locked by another operation (api.CodeLocked), and a project changed since
// the plan was made (api.CodeStalePlan).
func (s *Service) Apply(ctx context.Context, project, planID string) (*Job, error) {
	if planID == "" {
		return nil, api.BadRequest("plan: the ID of a plan of this project is required")
	}
	doc, err := s.loadPlan(ctx, project, planID)
	if err != nil {
		return nil, err
	}
	g, err := buildGraph(doc.Resources, doc.Dependencies)
	if err != nil {
		return nil, err
	}
	l, err := s.acquire(ctx, project, "apply of "+planID)
	if err != nil {
		return nil, s.lockedError(err)
	}
	j, err := s.begin(l.fenced(ctx), project, planID, doc)
	if err != nil {
		l.release()
		return nil, err
	}
	opts := provider.Options{DeleteVolumes: doc.DeleteVolumes}
	s.work.Go(func() { s.run(j, l, g, opts) })
	return j, nil
}

// begin checks, under the lease, that the project is as the plan saw it,
// records the apply and forgets the plan (its blobs are the apply's now).
func (s *Service) begin(ctx context.Context, project, planID string, doc storedPlan) (*Job, error) {
	recs, err := s.deps.Resources.ListResources(ctx, project)
	if err != nil {
		return nil, err
	}
	if stateHash(recs) != doc.StateHash {
		return nil, api.Errorf(api.CodeStalePlan,
			"%s changed since %s was made (an apply, a rollout restart, an auto-revert or a reschedule): plan again", project, planID)
	}
	inputs, digest, err := recordOf(doc)
	if err != nil {
		return nil, err
	}
	rec, err := s.deps.Applies.StartApply(ctx, store.NewApply{Project: project, Actor: store.ActorOf(ctx), Blobs: doc.blobs(),
		At: s.now(), Inputs: inputs, Summary: doc.Summary, Digest: digest, RollbackOf: doc.RollbackOf, Keep: s.cfg.KeepApplies})
	if err != nil {
		return nil, err
	}
	if err := s.deps.Plans.DeletePlan(ctx, planID); err != nil {
		s.log.Warn("applied plan not forgotten (it expires)", zap.String("plan", planID), zap.Error(err))
	}
	j := newJob(rec.ID, project, rec.Actor)
	s.mu.Lock()
	s.jobs[j.id] = j
	s.mu.Unlock()
	what := planID
	if rec.RollbackOf > 0 {
		what = fmt.Sprintf("%s, a rollback to apply %d", planID, rec.RollbackOf)
	}
	j.add(api.Progress{Time: s.now(), Status: api.StatusStarted, Message: fmt.Sprintf("apply %d of %s (%s) started", j.id, project, what)})
	return j, nil
}

// run is the apply itself, on the service's life: a client that goes away
// changes nothing. The lease is released when the work ends, however it
// ends, and before the outcome is told: a client that hears "finished" and
// goes on with its next command must not find the project still locked.
func (s *Service) run(j *Job, l *lease, g *graph.Graph, opts provider.Options) {
	defer l.release()
	ctx, cancel := context.WithCancel(l.fenced(store.WithActor(s.life, j.actor)))
	defer cancel()
	go func() {
		select {
		case <-l.lost:
			cancel()
		case <-ctx.Done():
		}
	}()
	log := s.log.With(zap.String("project", j.project), zap.Int64("apply", j.id))
	reg := s.deps.Providers.Registry(opts)
	for typ, p := range reg {
		reg[typ] = &progressProvider{Provider: p, typ: typ, job: j, now: s.now}
	}
	res, err := s.reconcilerFor(reg, log).Reconcile(ctx, j.project, g)
	if err == nil && opts.DeleteVolumes {
		if _, verr := s.deps.Providers.DeleteVolumes(ctx, j.project); verr != nil {
			err = fmt.Errorf("delete volumes: %w", verr)
		}
	}
	outcome, message := store.ApplySucceeded, summaryText(res)
	if err != nil {
		outcome, message = store.ApplyFailed, err.Error()
		if ctx.Err() != nil && s.life.Err() != nil {
			message = "interrupted: the server stopped during this apply; apply again to finish it (" + message + ")"
		}
	}
	l.release()
	// The outcome is recorded after the release, so not under the lease:
	// an apply whose lease was taken over still says how it ended.
	finishCtx, done := context.WithTimeout(context.WithoutCancel(s.life), 30*time.Second)
	defer done()
	if ferr := s.deps.Applies.FinishApply(finishCtx, j.id, outcome, message, s.now()); ferr != nil {
		log.Error("apply outcome not recorded", zap.Error(ferr))
	}
	summary := map[string]int{}
	for _, rr := range res.Resources {
		summary[string(rr.Action)]++
	}
	j.add(api.Progress{Time: s.now(), Status: api.StatusFinished, Outcome: string(outcome), Message: message, Summary: summary})
	log.Info("apply finished", zap.String("outcome", string(outcome)))
	s.finished(j.id)
}

// finished keeps the job's progress for late followers, up to a bound.
func (s *Service) finished(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = append(s.done, id)
	for len(s.done) > maxFinishedJobs {
		delete(s.jobs, s.done[0])
		s.done = s.done[1:]
	}
}

func summaryText(res reconciler.Result) string {
	return fmt.Sprintf("%d created, %d updated, %d deleted, %d unchanged",
		res.Count(reconciler.ActionCreate), res.Count(reconciler.ActionUpdate),
		res.Count(reconciler.ActionDelete), res.Count(reconciler.ActionUnchanged))
}

// progressProvider reports each operation of its provider to the job.
type progressProvider struct {
	reconciler.Provider
	typ resource.Kind
	job *Job
	now func() time.Time

	mu      sync.Mutex        // guards reasons
	reasons map[string]string // key + condition -> the last "not ready" reason reported
}

func (p *progressProvider) step(name, action, status string, err error) {
	s := api.Progress{Time: p.now(), Resource: resource.Key(p.typ, name), Action: action, Status: status}
	if err != nil {
		s.Message = err.Error()
	}
	p.job.add(s)
}

func (p *progressProvider) Create(ctx context.Context, project string, r *resource.Deployed) (map[string]any, error) {
	p.step(r.Name, "create", api.StatusStarted, nil)
	out, err := p.Provider.Create(ctx, project, r)
	p.step(r.Name, "create", outcomeOf(err), err)
	return out, err
}

func (p *progressProvider) Update(ctx context.Context, project string, prev, next *resource.Deployed) (map[string]any, error) {
	p.step(next.Name, "update", api.StatusStarted, nil)
	out, err := p.Provider.Update(ctx, project, prev, next)
	p.step(next.Name, "update", outcomeOf(err), err)
	return out, err
}

func (p *progressProvider) Delete(ctx context.Context, project string, r *resource.Deployed) error {
	p.step(r.Name, "delete", api.StatusStarted, nil)
	err := p.Provider.Delete(ctx, project, r)
	p.step(r.Name, "delete", outcomeOf(err), err)
	return err
}

// Ready reports a wait once per new reason, so a poll adds nothing new.
func (p *progressProvider) Ready(ctx context.Context, project string, r *resource.Deployed, cond resource.Condition) (bool, string, error) {
	ready, reason, err := p.Provider.Ready(ctx, project, r, cond)
	status, msg := api.StatusWaiting, reason
	switch {
	case err != nil:
		status, msg = api.StatusFailed, err.Error()
	case ready:
		status, msg = api.StatusDone, string(cond)
	}
	k := r.Name + "\x00" + string(cond)
	p.mu.Lock()
	if p.reasons == nil {
		p.reasons = map[string]string{}
	}
	fresh := p.reasons[k] != status+msg
	p.reasons[k] = status + msg
	p.mu.Unlock()
	if fresh {
		p.job.add(api.Progress{Time: p.now(), Resource: resource.Key(p.typ, r.Name), Action: "wait " + string(cond),
			Status: status, Message: msg})
	}
	return ready, reason, err
}

func outcomeOf(err error) string {
	if err != nil {
		return api.StatusFailed
	}
	return api.StatusDone
}

// job returns a running or recently finished apply of the project.
func (s *Service) job(project string, id int64) (*Job, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	return j, ok && j.project == project
}

// ApplyStatus returns an apply's record and the progress this server kept.
func (s *Service) ApplyStatus(ctx context.Context, project string, id int64) (api.ApplyStatus, error) {
	rec, err := s.applyRecord(ctx, project, id)
	if err != nil {
		return api.ApplyStatus{}, err
	}
	steps := []api.Progress{}
	if j, ok := s.job(project, id); ok {
		steps, _, _ = j.Since(0)
	}
	return api.ApplyStatus{Apply: ToApply(rec), Progress: steps}, nil
}

func (s *Service) applyRecord(ctx context.Context, project string, id int64) (store.Apply, error) {
	applies, err := s.deps.Applies.Applies(ctx, project)
	if err != nil {
		return store.Apply{}, err
	}
	for _, ap := range applies {
		if ap.ID == id {
			return ap, nil
		}
	}
	return store.Apply{}, api.NotFound("no apply %d of %s (the history keeps the last %d)", id, project, s.cfg.KeepApplies)
}

// Follow returns the job of an apply to follow its progress. An apply this
// server no longer follows (it finished long ago, or before a restart) gets
// a job that is over, whose one step is its outcome: "finished", or
// "running" for one another server runs or that was cut short.
func (s *Service) Follow(ctx context.Context, project string, id int64) (*Job, error) {
	if j, ok := s.job(project, id); ok {
		return j, nil
	}
	rec, err := s.applyRecord(ctx, project, id)
	if err != nil {
		return nil, err
	}
	j := newJob(id, project, rec.Actor)
	status := api.StatusFinished
	if rec.Outcome == store.ApplyRunning {
		status = api.StatusRunning
	}
	j.add(api.Progress{Time: rec.Finished, Status: status, Outcome: string(rec.Outcome), Message: rec.Message})
	j.over = true
	return j, nil
}
