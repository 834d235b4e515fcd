package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/schedule"
	"github.com/hatchery/hatchery/internal/store"
)

// Timer says when timed work is due; *schedule.Schedule is the one.
type Timer interface {
	// Next is the first tick strictly after the given time.
	Next(after time.Time) time.Time
	// Due splits the ticks of (last, now] into those to run (within
	// deadline of now, oldest first) and those missed, counted.
	Due(last, now time.Time, deadline time.Duration) (run []time.Time, missed int, lastMissed time.Time)
	String() string
}

// Scheduled is one piece of timed work: a scheduled egg of a project, its
// timer and the rules of its runs; or, with Ticks, another kind of work
// (a volume's backups) whose name is in Egg.
type Scheduled struct {
	Project string
	Egg     string
	Timer   Timer
	Rules   schedule.Rules
	// Ticks records the ticks of work that is not an egg's runs, in its
	// own table; nil for an egg (Runs and ScheduleStates).
	Ticks Ticks
}

// Ticks is how the scheduler decides the ticks of another kind of timed
// work than an egg's runs: that work keeps its schedules' states and
// records its ticks itself (a tick once: its own unique key, the last tick
// moved in the same fenced transaction, as CreateRuns does). The scheduler
// still decides when (Timer) and on which server (the loops' holder).
// It must be comparable (a pointer): the scheduler reads each one's states
// once per pass.
type Ticks interface {
	// ScheduleStates returns the states of its schedules (Egg holding the
	// work's name), by "project name".
	ScheduleStates(ctx context.Context) (map[string]store.ScheduleState, error)
	// InitSchedule records st unless its schedule has a state.
	InitSchedule(ctx context.Context, st store.ScheduleState) (bool, error)
	// DecideTicks records the ticks of sc due at now since st's last
	// tick. began is when this server's scheduler began: work that is
	// still open on a host that has not reported since is left undecided
	// for up to HearFirst (see hearFirst).
	DecideTicks(ctx context.Context, sc Scheduled, st store.ScheduleState, now, began time.Time) error
}

// HearFirst is hearFirst, for the Ticks of other kinds of work.
const HearFirst = hearFirst

// Source lists the timed work the scheduler decides. Scheduled eggs are
// one source (EggSchedules); volume backups another (volumes.Service,
// whose Scheduled carry Ticks), decided by this one scheduler.
type Source interface {
	// Scheduled returns the timed work of the project ("" for every
	// project).
	Scheduled(ctx context.Context, project string) ([]Scheduled, error)
}

// Projects lists the projects and their deployed resources.
type Projects interface {
	ListProjects(ctx context.Context) ([]string, error)
	ListResources(ctx context.Context, project string) ([]*resource.Deployed, error)
}

// EggSchedules is the Source of the eggs whose inputs have a Schedule. An
// egg whose schedule does not parse (stored before a check refused it) is
// skipped and logged, never a reason to stop the others.
type EggSchedules struct {
	Projects Projects
	// Skipped is told of each egg left out, and why.
	Skipped func(project, egg string, err error)
}

// Scheduled returns the scheduled eggs of project ("" for all), by
// project, then egg name.
func (e EggSchedules) Scheduled(ctx context.Context, project string) ([]Scheduled, error) {
	projects := []string{project}
	if project == "" {
		var err error
		if projects, err = e.Projects.ListProjects(ctx); err != nil {
			return nil, err
		}
	}
	var out []Scheduled
	for _, p := range projects {
		recs, err := e.Projects.ListResources(ctx, p)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			if r.Type != resource.Egg || r.Pending {
				continue
			}
			if _, ok := r.Inputs["schedule"]; !ok {
				continue
			}
			timer, rules, err := eggSchedule(r.Inputs)
			if err != nil {
				if e.Skipped != nil {
					e.Skipped(p, r.Name, err)
				}
				continue
			}
			out = append(out, Scheduled{Project: p, Egg: r.Name, Timer: timer, Rules: rules})
		}
	}
	return out, nil
}

// eggSchedule reads the schedule of an egg's inputs.
func eggSchedule(in map[string]any) (*schedule.Schedule, schedule.Rules, error) {
	egg, err := inputs.Decode[inputs.Egg](in)
	if err != nil {
		return nil, schedule.Rules{}, fmt.Errorf("inputs: %w", err)
	}
	if egg.Schedule == nil {
		return nil, schedule.Rules{}, errors.New("no schedule")
	}
	timer, rules, err := schedule.FromInputs(*egg.Schedule)
	if err != nil {
		return nil, schedule.Rules{}, fmt.Errorf("schedule: %w", err)
	}
	return timer, rules, nil
}

// holdsReplicas reports whether a run kept in its host's desired state
// would hold the egg's replica there stopped: a stateful egg that has
// long-running replicas (not a scheduled one).
func holdsReplicas(rec *resource.Deployed) bool {
	if rec == nil {
		return false
	}
	egg, err := inputs.Decode[inputs.Egg](rec.Inputs)
	return err == nil && egg.Placement.Volume != "" && egg.Schedule == nil
}
