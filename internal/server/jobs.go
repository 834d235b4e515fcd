package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/graph"
	"github.com/hatchery/hatchery/internal/provider"
	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

// progressJSON is one step of an apply, as its event stream shows it.
type progressJSON struct {
	Seq      int       `json:"seq"`
	Time     time.Time `json:"time"`
	Resource string    `json:"resource,omitempty"`
	// Action is create, update, delete or wait (a readiness condition).
	Action string `json:"action,omitempty"`
	// Status is started, done, failed or waiting; "finished" ends the stream.
	Status  string `json:"status"`
	Message string `json:"message,omitempty"`
	// Outcome and Summary are set on the finished step.
	Outcome string         `json:"outcome,omitempty"`
	Summary map[string]int `json:"summary,omitempty"`
}

// job is one apply running on the server, on its own goroutine: it outlives
// the request that started it, and its progress is kept for followers.
type job struct {
	id      int64
	project string

	mu      sync.Mutex // guards steps, changed, over
	steps   []progressJSON
	changed chan struct{} // closed and replaced at each step
	over    bool
}

func newJob(id int64, project string) *job {
	return &job{id: id, project: project, changed: make(chan struct{})}
}

// add records a step and wakes the followers.
func (j *job) add(p progressJSON) {
	j.mu.Lock()
	defer j.mu.Unlock()
	p.Seq = len(j.steps) + 1
	j.steps = append(j.steps, p)
	if p.Status == "finished" {
		j.over = true
	}
	close(j.changed)
	j.changed = make(chan struct{})
}

// since returns the steps after seq, whether the job is over, and a channel
// closed at the next step.
func (j *job) since(seq int) ([]progressJSON, bool, <-chan struct{}) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if seq > len(j.steps) {
		seq = len(j.steps)
	}
	return append([]progressJSON(nil), j.steps[max(seq, 0):]...), j.over, j.changed
}

// postApply starts the apply of a plan: 202 with the apply's ID and its
// event stream, or, to a client asking for text/event-stream, the stream.
func (a *applier) postApply(w http.ResponseWriter, r *http.Request) error {
	project, err := projectOf(r)
	if err != nil {
		return err
	}
	var req struct {
		Plan string `json:"plan"`
	}
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if req.Plan == "" {
		return badRequest("plan: the ID of a plan of this project is required")
	}
	doc, err := a.loadPlan(r, project, req.Plan)
	if err != nil {
		return err
	}
	g, err := buildGraph(doc.Resources, doc.Dependencies)
	if err != nil {
		return err
	}
	l, err := a.acquire(r.Context(), project, "apply of "+req.Plan)
	if err != nil {
		return lockedError(err)
	}
	j, err := a.begin(r, project, req.Plan, doc, l)
	if err != nil {
		l.release()
		return err
	}
	opts := provider.Options{DeleteVolumes: doc.DeleteVolumes}
	a.s.loops.Go(func() { a.run(j, l, g, opts) })
	if acceptsEventStream(r) {
		return a.stream(w, r, j)
	}
	writeJSON(w, http.StatusAccepted, map[string]any{
		"apply":  map[string]any{"id": j.id, "project": project, "plan": req.Plan},
		"events": fmt.Sprintf("/api/v1/projects/%s/applies/%d/events", project, j.id),
	})
	return nil
}

// begin checks, under the lease, that the project is as the plan saw it,
// records the apply and forgets the plan (its blobs are the apply's now).
func (a *applier) begin(r *http.Request, project, planID string, doc storedPlanDoc, l *lease) (*job, error) {
	ctx := r.Context()
	recs, err := a.deps.Resources.ListResources(ctx, project)
	if err != nil {
		return nil, err
	}
	if stateHash(recs) != doc.StateHash {
		return nil, errorf(http.StatusConflict, "stale_plan",
			"%s changed since %s was made (an apply, a rollout restart, an auto-revert or a reschedule): plan again", project, planID)
	}
	var blobs []string
	for _, d := range doc.Resources {
		if d.Source != "" {
			blobs = append(blobs, d.Source)
		}
	}
	rec, err := a.s.deps.Applies.StartApply(ctx, project, blobs, a.s.now())
	if err != nil {
		return nil, err
	}
	if err := a.deps.Plans.DeletePlan(ctx, planID); err != nil {
		a.log.Warn("applied plan not forgotten (it expires)", zap.String("plan", planID), zap.Error(err))
	}
	j := newJob(rec.ID, project)
	a.mu.Lock()
	a.jobs[j.id] = j
	a.mu.Unlock()
	j.add(progressJSON{Time: a.s.now(), Status: "started", Message: fmt.Sprintf("apply %d of %s (%s) started", j.id, project, planID)})
	return j, nil
}

// run is the apply itself, on the server's life: a client that goes away
// changes nothing. The lease is released when the work ends, however it ends,
// and before the outcome is told: a client that hears "finished" and goes on
// with its next command must not find the project still locked.
func (a *applier) run(j *job, l *lease, g *graph.Graph, opts provider.Options) {
	defer l.release()
	ctx, cancel := context.WithCancel(a.ctx)
	defer cancel()
	go func() {
		select {
		case <-l.lost:
			cancel()
		case <-ctx.Done():
		}
	}()
	log := a.log.With(zap.String("project", j.project), zap.Int64("apply", j.id))
	reg := a.deps.Providers.Registry(opts)
	for typ, p := range reg {
		reg[typ] = &progressProvider{Provider: p, typ: typ, job: j, now: a.s.now}
	}
	res, err := a.reconcilerFor(reg, log).Reconcile(ctx, j.project, g)
	if err == nil && opts.DeleteVolumes {
		if _, verr := a.deps.Providers.DeleteVolumes(ctx, j.project); verr != nil {
			err = fmt.Errorf("delete volumes: %w", verr)
		}
	}
	outcome, message := store.ApplySucceeded, summaryText(res)
	if err != nil {
		outcome, message = store.ApplyFailed, err.Error()
		if ctx.Err() != nil && a.ctx.Err() != nil {
			message = "interrupted: the server stopped during this apply; apply again to finish it (" + message + ")"
		}
	}
	l.release()
	finishCtx, done := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer done()
	if ferr := a.s.deps.Applies.FinishApply(finishCtx, j.id, outcome, message, a.s.now()); ferr != nil {
		log.Error("apply outcome not recorded", zap.Error(ferr))
	}
	summary := map[string]int{}
	for _, rr := range res.Resources {
		summary[string(rr.Action)]++
	}
	j.add(progressJSON{Time: a.s.now(), Status: "finished", Outcome: string(outcome), Message: message, Summary: summary})
	log.Info("apply finished", zap.String("outcome", string(outcome)))
	a.finished(j.id)
}

// finished keeps the job's progress for late followers, up to a bound.
func (a *applier) finished(id int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.done = append(a.done, id)
	for len(a.done) > maxFinishedJobs {
		delete(a.jobs, a.done[0])
		a.done = a.done[1:]
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
	job *job
	now func() time.Time

	mu      sync.Mutex        // guards reasons
	reasons map[string]string // key + condition -> the last "not ready" reason reported
}

func (p *progressProvider) step(name, action, status string, err error) {
	s := progressJSON{Time: p.now(), Resource: resource.Key(p.typ, name), Action: action, Status: status}
	if err != nil {
		s.Message = err.Error()
	}
	p.job.add(s)
}

func (p *progressProvider) Create(ctx context.Context, project string, r *resource.Deployed) (map[string]any, error) {
	p.step(r.Name, "create", "started", nil)
	out, err := p.Provider.Create(ctx, project, r)
	p.step(r.Name, "create", outcomeOf(err), err)
	return out, err
}

func (p *progressProvider) Update(ctx context.Context, project string, prev, next *resource.Deployed) (map[string]any, error) {
	p.step(next.Name, "update", "started", nil)
	out, err := p.Provider.Update(ctx, project, prev, next)
	p.step(next.Name, "update", outcomeOf(err), err)
	return out, err
}

func (p *progressProvider) Delete(ctx context.Context, project string, r *resource.Deployed) error {
	p.step(r.Name, "delete", "started", nil)
	err := p.Provider.Delete(ctx, project, r)
	p.step(r.Name, "delete", outcomeOf(err), err)
	return err
}

// Ready reports a wait once per new reason, so a poll adds nothing new.
func (p *progressProvider) Ready(ctx context.Context, project string, r *resource.Deployed, cond resource.Condition) (bool, string, error) {
	ready, reason, err := p.Provider.Ready(ctx, project, r, cond)
	status, msg := "waiting", reason
	switch {
	case err != nil:
		status, msg = "failed", err.Error()
	case ready:
		status, msg = "done", string(cond)
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
		p.job.add(progressJSON{Time: p.now(), Resource: resource.Key(p.typ, r.Name), Action: "wait " + string(cond),
			Status: status, Message: msg})
	}
	return ready, reason, err
}

func outcomeOf(err error) string {
	if err != nil {
		return "failed"
	}
	return "done"
}

func acceptsEventStream(r *http.Request) bool {
	return r.Header.Get("Accept") == "text/event-stream"
}

// job returns a running or recently finished apply of the project.
func (a *applier) job(project string, id int64) (*job, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	j, ok := a.jobs[id]
	return j, ok && j.project == project
}

func applyIDOf(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, badRequest("path: apply ID %q is not a positive whole number", r.PathValue("id"))
	}
	return id, nil
}

// getApply answers an apply's record and the progress this server kept.
func (a *applier) getApply(w http.ResponseWriter, r *http.Request) error {
	project, err := projectOf(r)
	if err != nil {
		return err
	}
	id, err := applyIDOf(r)
	if err != nil {
		return err
	}
	rec, err := a.applyRecord(r, project, id)
	if err != nil {
		return err
	}
	steps := []progressJSON{}
	if j, ok := a.job(project, id); ok {
		steps, _, _ = j.since(0)
	}
	writeJSON(w, http.StatusOK, map[string]any{"apply": toApplyJSON(rec), "progress": steps})
	return nil
}

func (a *applier) applyRecord(r *http.Request, project string, id int64) (store.Apply, error) {
	applies, err := a.s.deps.Applies.Applies(r.Context(), project)
	if err != nil {
		return store.Apply{}, err
	}
	for _, ap := range applies {
		if ap.ID == id {
			return ap, nil
		}
	}
	return store.Apply{}, notFoundf("no apply %d of %s (the history keeps the last %d)", id, project, store.ApplyHistoryLimit)
}

// getApplyEvents streams an apply's progress as server-sent events until it
// finishes. An apply this server no longer follows (it finished long ago, or
// before a restart) gets its outcome as the one event.
func (a *applier) getApplyEvents(w http.ResponseWriter, r *http.Request) error {
	project, err := projectOf(r)
	if err != nil {
		return err
	}
	id, err := applyIDOf(r)
	if err != nil {
		return err
	}
	if j, ok := a.job(project, id); ok {
		return a.stream(w, r, j)
	}
	rec, err := a.applyRecord(r, project, id)
	if err != nil {
		return err
	}
	j := newJob(id, project)
	status := "finished"
	if rec.Outcome == store.ApplyRunning { // another server's, or cut short
		status = "running"
	}
	j.add(progressJSON{Time: rec.Finished, Status: status, Outcome: string(rec.Outcome), Message: rec.Message})
	j.over = true
	return a.stream(w, r, j)
}

// stream writes a job's steps from Last-Event-ID on, as "progress" events
// and a last "done" event, until the job is over or the client leaves.
func (a *applier) stream(w http.ResponseWriter, r *http.Request, j *job) error {
	seq := 0
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		n, err := strconv.Atoi(id)
		if err != nil || n < 0 {
			return badRequest("Last-Event-ID: %q is not a whole number", id)
		}
		seq = n
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	keepAlive := time.NewTicker(a.s.cfg.KeepAlive)
	defer keepAlive.Stop()
	for {
		steps, over, changed := j.since(seq)
		for _, s := range steps {
			name := "progress"
			if s.Status == "finished" || s.Status == "running" {
				name = "done"
			}
			data, _ := json.Marshal(s)
			if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", s.Seq, name, data); err != nil {
				return nil
			}
			seq = s.Seq
		}
		if err := rc.Flush(); err != nil || over {
			return nil
		}
		select {
		case <-changed:
		case <-keepAlive.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return nil
			}
		case <-a.s.closing:
			return nil
		case <-r.Context().Done():
			return nil
		}
	}
}
