package server

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/jobs"
	"github.com/hatchery/hatchery/internal/spec"
	"github.com/hatchery/hatchery/internal/store"
)

// The jobs endpoints (docs/API.md, "Runs and schedules"): `hatch run`,
// `hatch runs`, `hatch schedule run|pause|resume` and the schedules `hatch
// status` shows. Handlers check the path and body and leave every decision
// (which host, whether a stateful egg may run, what a schedule fires) to
// the jobs service.

// Jobs is the jobs service (internal/jobs) as the API uses it. project is
// "<namespace>/<project>"; actor is who asked, recorded with the run or
// the schedule's change.
type Jobs interface {
	Start(ctx context.Context, project, egg string, req api.RunRequest, actor string) (api.Run, error)
	Stop(ctx context.Context, project, runID, actor string) (api.Run, error)
	Get(ctx context.Context, project, runID string) (api.Run, error)
	// Wait returns once the run's state differs from state, or when ctx
	// ends (then the run as it is, no error).
	Wait(ctx context.Context, project, runID, state string) (api.Run, error)
	List(ctx context.Context, project, egg string) ([]api.Run, error)
	Schedules(ctx context.Context, project string) ([]api.Schedule, error)
	Fire(ctx context.Context, project, egg, actor string) (api.Run, error)
	Pause(ctx context.Context, project, egg, actor string) error
	Resume(ctx context.Context, project, egg, actor string) error
	// Collector is the jobs' metrics (the last success of each scheduled
	// egg), served on /metrics.
	Collector() prometheus.Collector
}

var _ Jobs = (*jobs.Service)(nil)

// mayRun is who may start and stop runs and fire a schedule: a command
// run in a new container of an egg is exec's right, so an admin token, or
// the project's deploy token made with --exec (projectExec). Reading runs
// and schedules, and pausing or resuming one, are the project's
// (projectScoped): a deploy token that may apply may change the schedule.
func mayRun(p Principal, r *http.Request) bool { return projectExec(p, r) }

// runIDPattern is a run ID as the jobs service makes them: what a path
// may name, checked before any lookup.
var runIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// projectEgg returns the checked project and egg of the path.
func projectEgg(r *http.Request) (string, string, error) {
	project, err := projectOf(r)
	if err != nil {
		return "", "", err
	}
	egg := r.PathValue("egg")
	if !spec.ValidName(egg) {
		return "", "", api.BadRequest("path: egg %q is not an egg's name ([a-z0-9-], 1 to 40 characters)", egg)
	}
	return project, egg, nil
}

// projectRun returns the checked project and run ID of the path.
func projectRun(r *http.Request) (string, string, error) {
	project, err := projectOf(r)
	if err != nil {
		return "", "", err
	}
	id := r.PathValue("id")
	if !runIDPattern.MatchString(id) {
		return "", "", api.BadRequest("path: run ID %q is not a run's ID (hatch runs lists them)", id)
	}
	return project, id, nil
}

// checkRunRequest refuses what no run could be: an empty argument in the
// command's first place, a timeout that is not a positive duration.
func checkRunRequest(req api.RunRequest) error {
	if len(req.Command) > 0 && req.Command[0] == "" {
		return api.BadRequest("command: its first word, the program, is empty")
	}
	if req.Timeout != "" {
		if d, err := time.ParseDuration(req.Timeout); err != nil || d <= 0 {
			return api.BadRequest("timeout: %q is not a positive duration (for example 30m)", req.Timeout)
		}
	}
	return nil
}

// postRun is POST .../eggs/{egg}/runs: a new run of the egg (hatch run),
// answered 201 with the run as recorded, before its container starts.
func (s *Server) postRun(w http.ResponseWriter, r *http.Request) error {
	project, egg, err := projectEgg(r)
	if err != nil {
		return err
	}
	var req api.RunRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if err := checkRunRequest(req); err != nil {
		return err
	}
	if req.Host != "" {
		// As exec is: a host whose agent runs with --no-exec refuses runs
		// too, said before anything is recorded. (Its agent fails a run
		// placed there anyway.)
		if err := s.deps.Fleet.CheckRunHost(r.Context(), req.Host); err != nil {
			return err
		}
	}
	run, err := s.deps.Jobs.Start(r.Context(), project, egg, req, store.ActorOf(r.Context()))
	return answerRun(w, http.StatusCreated, run, err)
}

// getRuns is GET .../runs (?egg=): the project's runs, newest first.
func (s *Server) getRuns(w http.ResponseWriter, r *http.Request) error {
	project, err := projectOf(r)
	if err != nil {
		return err
	}
	egg := r.URL.Query().Get("egg")
	if egg != "" && !spec.ValidName(egg) {
		return api.BadRequest("egg: %q is not an egg's name ([a-z0-9-], 1 to 40 characters)", egg)
	}
	runs, err := s.deps.Jobs.List(r.Context(), project, egg)
	if err != nil {
		return jobsError(err)
	}
	if runs == nil {
		runs = []api.Run{}
	}
	writeJSON(w, http.StatusOK, api.Runs{Runs: runs})
	return nil
}

// getRun is GET .../runs/{id}: the run; with ?wait=D&state=S, a long-poll
// answered once its state is no longer S, or after the wait (the run as
// it is). Held under its token like the other long-polls.
func (s *Server) getRun(w http.ResponseWriter, r *http.Request) error {
	project, id, err := projectRun(r)
	if err != nil {
		return err
	}
	wait, err := s.parseWait(r)
	if err != nil {
		return err
	}
	state := r.URL.Query().Get("state")
	if wait == 0 || state == "" {
		run, err := s.deps.Jobs.Get(r.Context(), project, id)
		return answerRun(w, http.StatusOK, run, err)
	}
	return s.waitForChange(w, r, wait, func(ctx context.Context) (any, error) {
		run, err := s.deps.Jobs.Wait(ctx, project, id, state)
		if err != nil {
			return nil, jobsError(err)
		}
		return run, nil
	})
}

// waitForChange is the long-poll of a run or a volume task: held under its
// token like the other long-polls (endpointRunWait), it answers what wait
// returns once the awaited record changed, the wait passed, the server
// closes or the hold ends (replaced by a newer poll of the token: answered
// as usual; revoked: ended). A token revoked while it waited is refused.
func (s *Server) waitForChange(w http.ResponseWriter, r *http.Request, wait time.Duration,
	waitFor func(ctx context.Context) (any, error)) error {
	held, err := s.hold(r, endpointRunWait)
	if err != nil {
		return err
	}
	defer held.Release()
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	go func() {
		select {
		case <-held.Done():
		case <-s.closing:
		case <-ctx.Done():
		}
		cancel()
	}()
	answer, err := waitFor(ctx)
	if err != nil {
		return err
	}
	select {
	case <-held.Done():
		if !replaced(held) {
			return ended(held)
		}
	default:
		// Its token may have been revoked while it waited.
		if err := s.recheck(r); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, answer)
	return nil
}

// postRunStop is POST .../runs/{id}/stop: its host is asked to stop the
// run (Ctrl-C on hatch run); answered with the run as it is, not yet ended.
func (s *Server) postRunStop(w http.ResponseWriter, r *http.Request) error {
	project, id, err := projectRun(r)
	if err != nil {
		return err
	}
	run, err := s.deps.Jobs.Stop(r.Context(), project, id, store.ActorOf(r.Context()))
	return answerRun(w, http.StatusOK, run, err)
}

// getRunAttach is GET .../runs/{id}/attach (?width=&height=): a WebSocket
// to a terminal's run (`hatch run -it`), as exec's stream is, served by the
// host the run was delivered to, which starts the run's container once
// attached. Whoever may start runs may attach (mayRun); the host gives a
// run's terminal once, to the first attach.
func (s *Server) getRunAttach(w http.ResponseWriter, r *http.Request) error {
	project, id, err := projectRun(r)
	if err != nil {
		return err
	}
	req := contract.AttachRequest{Project: project, Run: id}
	if err := parseTermSize(r.URL.Query(), &req.Width, &req.Height); err != nil {
		return err
	}
	run, err := s.deps.Jobs.Get(r.Context(), project, id)
	if err != nil {
		return jobsError(err)
	}
	switch {
	case !run.TTY:
		return api.Errorf(api.CodeConflict, "run %s has no terminal: it was not started with hatch run -it", id)
	case run.Ended():
		return api.Errorf(api.CodeConflict, "run %s has ended (%s)", id, run.State)
	case run.Host == "" || run.DeliveredAt.IsZero():
		return api.Errorf(api.CodeConflict, "run %s is not on a host yet (its project's lease is held): try again", id)
	}
	req.Egg = run.Egg
	sess, err := s.openSession(r.Context(), run.Host, contract.SessionOffer{Kind: contract.SessionAttach, Attach: &req})
	if err != nil {
		return err
	}
	defer sess.Close()
	s.log.Info("attach", zap.String("actor", sess.Actor), zap.String("project", project), zap.String("egg", run.Egg),
		zap.String("run", id), zap.String("host", run.Host))
	s.pairSession(w, r, sess)
	return nil
}

// getSchedules is GET .../schedules: the project's scheduled eggs, each
// with its next run.
func (s *Server) getSchedules(w http.ResponseWriter, r *http.Request) error {
	project, err := projectOf(r)
	if err != nil {
		return err
	}
	scheds, err := s.deps.Jobs.Schedules(r.Context(), project)
	if err != nil {
		return jobsError(err)
	}
	if scheds == nil {
		scheds = []api.Schedule{}
	}
	writeJSON(w, http.StatusOK, api.Schedules{Schedules: scheds})
	return nil
}

// postScheduleRun is POST .../schedules/{egg}/run: the scheduled egg fired
// now, outside its schedule (hatch schedule run); 201 with the run.
func (s *Server) postScheduleRun(w http.ResponseWriter, r *http.Request) error {
	project, egg, err := projectEgg(r)
	if err != nil {
		return err
	}
	run, err := s.deps.Jobs.Fire(r.Context(), project, egg, store.ActorOf(r.Context()))
	return answerRun(w, http.StatusCreated, run, err)
}

// postSchedulePause and postScheduleResume are POST
// .../schedules/{egg}/pause and .../resume: 204, idempotent.
func (s *Server) postSchedulePause(w http.ResponseWriter, r *http.Request) error {
	return s.scheduleSwitch(w, r, s.deps.Jobs.Pause)
}

func (s *Server) postScheduleResume(w http.ResponseWriter, r *http.Request) error {
	return s.scheduleSwitch(w, r, s.deps.Jobs.Resume)
}

func (s *Server) scheduleSwitch(w http.ResponseWriter, r *http.Request, do func(ctx context.Context, project, egg, actor string) error) error {
	project, egg, err := projectEgg(r)
	if err != nil {
		return err
	}
	if err := do(r.Context(), project, egg, store.ActorOf(r.Context())); err != nil {
		return jobsError(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// answerRun writes the run the jobs service answered, at status, or its
// error.
func answerRun(w http.ResponseWriter, status int, run api.Run, err error) error {
	if err != nil {
		return jobsError(err)
	}
	writeJSON(w, status, run)
	return nil
}

// jobsError maps the jobs service's errors to the API's, with their
// message (which says why, and what to do): no such project, egg or run
// is 404, a run refused as asked 409, and no host up to take it 409 too
// (a 503 would send the client to another server, which has no other host).
func jobsError(err error) error {
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		return api.NotFound("%v", err)
	case errors.Is(err, jobs.ErrRefused):
		return api.Errorf(api.CodeConflict, "%v", err)
	case errors.Is(err, jobs.ErrNoHost):
		return api.Errorf(api.CodeConflict, "%v", err)
	}
	return err
}
