package desired

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/schedule"
)

// HostSteps are the container steps a plan implies on one host.
type HostSteps struct {
	// Host is the host's ID; "" gathers the steps whose host is known only
	// after apply (the egg's placement depends on a resource yet to be made).
	Host  string   `json:"host"`
	Name  string   `json:"name"`
	Steps []string `json:"steps"`
}

// PlanChange is one planned change as Preview reads it.
type PlanChange struct {
	reconciler.Change
	Source string // the desired source blob, for eggs built from one
}

// Preview works out, without writing anything, what the planned changes
// imply on each host: replicas started, stopped, rolled or scaled, volumes
// created, kept or deleted, routes attached. Placement is previewed against
// the fleet and desired states as they are now, each egg on its own. A route
// or published port another project holds on any host is refused with a
// *ConflictError, as the apply would refuse it, wherever the egg would run.
// deleteVolumes previews volumes deleted with their data, as the providers
// delete them with provider.Options.DeleteVolumes.
func (s *States) Preview(ctx context.Context, project string, changes []PlanChange, records []*resource.Deployed, deleteVolumes bool) ([]HostSteps, error) {
	v, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	p := &preview{ctx: ctx, s: s, v: v, project: project, deleteVolumes: deleteVolumes, steps: map[string][]string{}, eggHosts: map[string][]string{},
		records: map[string]*resource.Deployed{}}
	for _, r := range records {
		p.records[r.Key()] = r
	}
	for _, c := range changes {
		typ, name, _ := resource.SplitKey(c.Key)
		var err error
		switch typ {
		case resource.Egg:
			err = p.egg(ctx, name, c)
		case resource.Volume:
			err = p.volume(name, c)
		case resource.Route:
			err = p.route(name, c)
		}
		if err != nil {
			var conflict *ConflictError
			if errors.As(err, &conflict) {
				return nil, conflict
			}
			return nil, fmt.Errorf("preview %s: %w", c.Key, err)
		}
	}
	if deleteVolumes {
		for host, d := range v.states {
			for _, vol := range d.Volumes {
				if resource.Project(vol.Namespace, vol.Project) == project && !vol.Delete && p.records[resource.Key(resource.Volume, vol.Name)] == nil {
					p.add(host, "delete volume %s (retained earlier) and its data", vol.Name)
				}
			}
		}
	}
	return p.result(), nil
}

// preview is one Preview's working state.
type preview struct {
	ctx           context.Context
	s             *States
	v             *view
	project       string
	deleteVolumes bool                          // hatch destroy --volumes: deleted volumes lose their data
	records       map[string]*resource.Deployed // by key
	steps         map[string][]string           // host ID -> steps
	eggHosts      map[string][]string           // egg name -> hosts after apply; absent: unknown
}

func (p *preview) add(host, format string, args ...any) {
	p.steps[host] = append(p.steps[host], fmt.Sprintf(format, args...))
}

func (p *preview) egg(ctx context.Context, name string, c PlanChange) error {
	id, err := workloadID(p.project, name)
	if err != nil {
		return err
	}
	current := p.v.workloadsOf(id)
	switch c.Action {
	case reconciler.ActionDelete:
		for _, host := range slices.Sorted(maps.Keys(current)) {
			if n := current[host].Replicas; n > 0 {
				p.add(host, "stop %s: %s", name, plural(n, "replica"))
			}
		}
		return nil
	case reconciler.ActionUnchanged:
		p.eggHosts[name] = slices.Sorted(maps.Keys(current))
		return nil
	}
	inputs := resource.Clone(c.Inputs)
	for _, k := range c.Unknown {
		delete(inputs, k)
	}
	e, err := NewEgg(p.project, name, inputs, c.Source, RevisionOf(p.recordOutputs(c.Key)))
	if err != nil {
		return err
	}
	if err := p.v.checkPorts(p.project, e.ports()); err != nil {
		return err
	}
	if slices.Contains(c.Unknown, "placement") {
		p.add("", "place %s: %s", name, plural(e.in.Replicas, "replica"))
		return nil
	}
	if e.Scheduled() {
		if sch, _, err := schedule.FromInputs(*e.in.Schedule); err == nil {
			p.add("", "schedule %s: %s, no long-running replica", name, sch)
		}
	}
	dec, err := p.s.placeReplicas(ctx, p.v, e)
	if cerr := ctx.Err(); cerr != nil {
		return cerr // not the egg's problem: the plan is cut short
	}
	if err != nil {
		p.add("", "%s cannot be placed now: %v", name, err)
		return nil
	}
	specUnknown := len(c.Unknown) > 0
	specs := map[string]contract.WorkloadSpec{}
	for _, host := range slices.Sorted(maps.Keys(dec.Slots)) {
		if specs[host], err = e.workload(host, dec.Slots[host], nil); err != nil {
			return err
		}
	}
	for _, host := range slices.Sorted(slices.Values(union(maps.Keys(current), maps.Keys(specs)))) {
		old, next := current[host], specs[host]
		switch {
		case next.Replicas > 0 && old.Replicas == 0:
			p.add(host, "start %s: %s", name, plural(next.Replicas, "replica"))
		case next.Replicas == 0 && old.Replicas > 0:
			p.add(host, "stop %s: %s", name, plural(old.Replicas, "replica"))
		case next.Replicas > 0:
			if specUnknown || contract.SpecHash(old) != contract.SpecHash(next) {
				p.add(host, "roll %s: %s", name, rollText(next, specUnknown))
			}
			if old.Replicas != next.Replicas {
				p.add(host, "scale %s: %d -> %d replicas", name, old.Replicas, next.Replicas)
			}
		}
	}
	if dec.Unplaced > 0 {
		why := dec.Waiting
		if why == "" {
			why = "no host has room or qualifies (hatch status explains each host)"
		}
		p.add("", "%s: %s not placed: %s", name, plural(dec.Unplaced, "replica"), why)
	}
	p.eggHosts[name] = slices.Sorted(maps.Keys(specs))
	return nil
}

func (p *preview) recordOutputs(key string) map[string]any {
	if r := p.records[key]; r != nil {
		return r.Outputs
	}
	return nil
}

func rollText(w contract.WorkloadSpec, specUnknown bool) string {
	order := "start-first"
	if w.Stateful() {
		order = "stop-first"
	}
	text := fmt.Sprintf("%s, %s, %d at a time", plural(w.Replicas, "replica"), order, min(w.MaxSurge(), w.Replicas))
	if specUnknown {
		text += " (new spec known after apply)"
	}
	return text
}

func (p *preview) volume(name string, c PlanChange) error {
	switch c.Action {
	case reconciler.ActionCreate:
		if host, ok := p.v.volumeEntry(p.project, name); ok {
			p.add(host, "keep volume %s (retained: its data is used again)", name)
			return nil
		}
		if slices.Contains(c.Unknown, "placement") {
			p.add("", "create volume %s", name)
			return nil
		}
		in, err := decode[inputs.Volume](c.Key, c.Inputs)
		if err != nil {
			return err
		}
		host, err := p.s.volumeHost(p.v, p.project, name, in)
		if err != nil {
			p.add("", "volume %s has no host now: %v", name, err)
			return nil
		}
		p.add(host, "create volume %s", name)
	case reconciler.ActionDelete:
		host, ok := p.v.volumeEntry(p.project, name)
		switch {
		case !ok:
		case p.deleteVolumes:
			p.add(host, "delete volume %s and its data", name)
		default:
			p.add(host, "keep volume %s (retained: hatch destroy --volumes deletes it)", name)
		}
	}
	return nil
}

func (p *preview) route(name string, c PlanChange) error {
	in, err := decode[inputs.Route](c.Key, c.Inputs)
	if err != nil {
		return err
	}
	r, err := routeOf(in, p.s.acme)
	if err != nil {
		return err
	}
	id, err := workloadID(p.project, in.Egg)
	if err != nil {
		return err
	}
	current := slices.Sorted(maps.Keys(p.v.workloadsOf(id)))
	switch c.Action {
	case reconciler.ActionDelete:
		for _, host := range current {
			p.add(host, "remove route %s%s", r.Host, r.PathPrefix)
		}
		return nil
	case reconciler.ActionUnchanged:
		return nil
	}
	// Eggs come before their routes in a plan: the egg's hosts after apply
	// are known unless its placement is not.
	hosts, known := p.eggHosts[in.Egg]
	if !known {
		for id := range p.v.states { // placement unknown: any host may be the egg's
			hosts = append(hosts, id)
		}
		slices.Sort(hosts)
	}
	if err := p.v.checkRoute(p.project, r); err != nil {
		return err
	}
	if err := p.v.checkTLS(p.project, r); err != nil {
		return err
	}
	note := tlsNote(in, r)
	if r.TLS == contract.TLSAuto {
		p.warnPorts(r)
	}
	if !known {
		p.add("", "route %s%s to %s%s", r.Host, r.PathPrefix, in.Egg, note)
		return nil
	}
	for _, host := range hosts {
		p.add(host, "route %s%s to %s%s", r.Host, r.PathPrefix, in.Egg, note)
	}
	return nil
}

// warnPorts warns about each host whose ingress does not listen on 80 and
// 443, as its last report says: the CA validates a certificate on port 80,
// and clients look for HTTPS on 443. Every host serves every route, so
// every host is looked at.
func (p *preview) warnPorts(r contract.Route) {
	for _, host := range slices.Sorted(maps.Keys(p.v.states)) {
		st, err := p.s.statuses.Status(p.ctx, host)
		if err != nil {
			continue // no report yet: nothing to say
		}
		var rep contract.StatusReport
		if json.Unmarshal(st.Report, &rep) != nil || rep.HTTPPort == 0 || (rep.HTTPPort == 80 && rep.HTTPSPort == 443) {
			continue
		}
		https := "none"
		if rep.HTTPSPort != 0 {
			https = fmt.Sprintf(":%d", rep.HTTPSPort)
		}
		p.add(host, "warning: route %s%s gets its certificate over HTTP-01 on port 80 and serves HTTPS clients expect on 443, "+
			"but this host's ingress listens on :%d and %s (hatch agent --ingress-addr :80 --https-addr :443, or a proxy forwarding them)",
			r.Host, r.PathPrefix, rep.HTTPPort, https)
	}
}

// result returns the steps by host name, those known only after apply last.
func (p *preview) result() []HostSteps {
	out := make([]HostSteps, 0, len(p.steps))
	for host, steps := range p.steps {
		name := p.v.name(host)
		if host == "" {
			name = "(known after apply)"
		}
		out = append(out, HostSteps{Host: host, Name: name, Steps: steps})
	}
	slices.SortFunc(out, func(a, b HostSteps) int {
		switch {
		case (a.Host == "") != (b.Host == ""):
			if a.Host == "" {
				return 1
			}
			return -1
		case a.Name != b.Name:
			return strings.Compare(a.Name, b.Name)
		}
		return strings.Compare(a.Host, b.Host)
	})
	return out
}

func union(a, b func(yield func(string) bool)) []string {
	seen := map[string]bool{}
	var out []string
	for _, seq := range []func(yield func(string) bool){a, b} {
		for k := range seq {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	return out
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
