package fleet

import (
	"cmp"
	"context"
	"fmt"
	"path"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/store"
)

// EventExec: an admin ran a command in a container (`hatch exec`): where,
// the program and how many arguments it had, never the arguments or input.
const EventExec store.EventType = "exec.started"

// LogTarget is a host a project's logs are read from, and the eggs of the
// project its desired state places on it: the only eggs whose records it
// may send (a host is trusted with what is placed on it, nothing more).
type LogTarget struct {
	Host string
	Eggs []string
}

// LogScope is where a `hatch logs` reads now: its Targets; and Hosts, every
// host not removed, whose desired states a follow watches, since a roll may
// place the project on any of them.
type LogScope struct {
	Targets []LogTarget
	Hosts   []string
}

// LogTargets returns the hosts a `hatch logs` of the project reads: those
// not down whose desired state places an egg of the project (egg, if not
// "": that egg), sorted by ID; only (an ID or a name) restricts them to one
// host, which must exist and not be down. run, if not "", reads one run of
// egg instead: its container is read only on the host whose desired state
// holds that run (a host is trusted with the runs it was given, as with
// the eggs placed on it). A follow calls it again when a desired state
// changes: a host placed on later joins then.
func (s *Service) LogTargets(ctx context.Context, namespace, project, egg, run, only string) (LogScope, error) {
	hosts, err := s.statusHosts(ctx, namespace, project)
	if err != nil {
		return LogScope{}, err
	}
	var out LogScope
	named := false
	for _, h := range hosts {
		out.Hosts = append(out.Hosts, h.ID)
		if only != "" && only != h.ID && only != h.Name {
			continue
		}
		named = true
		if h.State == store.HostDown {
			if only != "" {
				return LogScope{}, api.Errorf(api.CodeConflict, "host %s is down: its logs cannot be read until it reports again", only)
			}
			continue
		}
		if t := logTarget(h, egg, run); len(t.Eggs) > 0 {
			out.Targets = append(out.Targets, t)
		}
	}
	if !named && only != "" {
		return LogScope{}, api.NotFound("no host %q: `hatch hosts` lists them", only)
	}
	return out, nil
}

// CheckRunHost refuses a run asked on host (an ID or a name) whose agent
// last reported --no-exec, which refuses runs as it refuses exec: 409,
// before anything is recorded. A host not known is left to the jobs
// service, which says so.
func (s *Service) CheckRunHost(ctx context.Context, host string) error {
	hosts, err := s.statusHosts(ctx, "", "")
	if err != nil {
		return err
	}
	for _, h := range hosts {
		if (host == h.ID || host == h.Name) && h.NoExec {
			return api.Errorf(api.CodeConflict, "runs are turned off on host %s (hatch agent --no-exec refuses exec and runs)", h.label())
		}
	}
	return nil
}

// ExecTarget is where `hatch exec` runs: a host and a slot whose container
// its agent last reported running.
type ExecTarget struct {
	Host, HostName string
	Slot           int
}

// ExecHost finds the host running the egg's slot (slot < 0: the lowest slot
// running anywhere), from the hosts' last reports, of hosts whose desired
// state places the egg only: a host's claim to run a replica placed
// elsewhere would hand it the operator's command line and input. only, a
// host's name or ID, restricts it to that host (slots are numbered per
// host).
func (s *Service) ExecHost(ctx context.Context, namespace, project, egg string, slot int, only string) (ExecTarget, error) {
	hosts, err := s.statusHosts(ctx, namespace, project)
	if err != nil {
		return ExecTarget{}, err
	}
	workload := contract.WorkloadID(namespace, project, egg)
	var best *ExecTarget
	execOff := "" // a host running the replica that refuses exec
	for _, h := range hosts {
		if h.State == store.HostDown {
			continue
		}
		if only != "" && only != h.ID && only != h.Name {
			continue
		}
		for _, c := range h.Containers {
			if c.WorkloadID != workload || c.State != contract.StateRunning || (slot >= 0 && c.Slot != slot) {
				continue
			}
			if h.NoExec {
				execOff = cmp.Or(execOff, h.label())
				continue
			}
			if best == nil || c.Slot < best.Slot {
				best = &ExecTarget{Host: h.ID, HostName: cmp.Or(h.Name, h.ID), Slot: c.Slot}
			}
		}
	}
	if best == nil && execOff != "" {
		return ExecTarget{}, api.Errorf(api.CodeConflict, "exec is turned off on host %s (hatch agent --no-exec)", execOff)
	}
	if best == nil {
		where := egg
		if slot >= 0 {
			where = fmt.Sprintf("%s/%d", egg, slot)
		}
		if only != "" {
			where += " on host " + only
		}
		return ExecTarget{}, api.NotFound("no running replica %s in %s/%s on a host that is up: `hatch status -n %s %s` shows them",
			where, namespace, project, namespace, project)
	}
	return *best, nil
}

// RecordExec records who ran what where: the program's base name and the
// number of its arguments, never the arguments themselves (they may hold
// secrets) nor the input.
func (s *Service) RecordExec(ctx context.Context, namespace, project, egg string, t ExecTarget, argv []string) {
	e := store.Event{Time: s.now(), Type: EventExec, Project: namespace + "/" + project, Host: t.Host,
		Resource: "egg/" + egg, Actor: store.ActorOf(ctx),
		Message: fmt.Sprintf("exec of %s (%d arguments) in %s/%d on %s", path.Base(argv[0]), len(argv)-1, egg, t.Slot, t.HostName)}
	if _, err := s.deps.Events.AppendEvent(context.WithoutCancel(ctx), e); err != nil {
		s.log.Warn("exec event not recorded", zap.Error(err))
	}
}
