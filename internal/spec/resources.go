package spec

import (
	"slices"
	"sort"
	"time"

	"github.com/hatchery/hatchery/internal/graph"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

// Resources maps the project to the reconciler's desired resources, sorted by
// key, and the explicit dependencies between them, sorted by child then
// parent. The other edges are references in the inputs, which graph.New adds.
// The package documentation describes every input.
func (p *Project) Resources() ([]*resource.Desired, []*resource.Dependency) {
	var rs []*resource.Desired
	var deps []*resource.Dependency
	add := func(typ resource.Kind, name string, in any) {
		rs = append(rs, &resource.Desired{Type: typ, Name: name, Inputs: inputs.Encode(in)})
	}
	for _, n := range p.Networks {
		add(resource.Network, n.Name, inputs.Network{Internal: n.Internal, Labels: n.Labels})
	}
	for _, s := range p.Secrets {
		add(resource.Secret, s.Name, inputs.Secret{File: s.File, Env: s.Env})
	}
	owners := map[string]*Egg{} // volume -> the egg mounting it
	for _, e := range p.Eggs {
		for _, v := range e.namedVolumes() {
			owners[v] = e
		}
	}
	for _, v := range p.Volumes {
		add(resource.Volume, v.Name, volumeFor(v, owners[v.Name]))
	}
	failover := map[string]bool{} // the volumes with a failover policy
	for _, v := range p.Volumes {
		failover[v.Name] = v.Failover != nil
	}
	for _, e := range p.Eggs {
		in := eggInputsOf(e)
		for i, m := range e.Volumes {
			// eggInputsOf makes one mount per mount, in order.
			in.Volumes[i].Fenced = m.Type == MountVolume && failover[m.Source]
		}
		in.PullAuth = p.pullAuth(e.Image)
		add(resource.Egg, e.Name, in)
		child := resource.Key(resource.Egg, e.Name)
		for _, d := range e.DependsOn {
			deps = append(deps, &resource.Dependency{Parent: resource.Key(resource.Egg, d.Egg), Child: child, Condition: d.Condition})
		}
		for _, r := range e.Routes {
			in := inputs.Route{Host: r.Host, Path: r.Path, Egg: e.Name, Port: e.Port,
				UpstreamTimeout: optionalDuration(r.UpstreamTimeout), TLS: r.TLS, HSTS: r.HSTS, Hosts: []string{ref(resource.Egg, e.Name, inputs.OutputHosts)}}
			if r.TLS == TLSSecret {
				in.Cert, in.Key = ref(resource.Secret, r.CertSecret, inputs.OutputHandle), ref(resource.Secret, r.KeySecret, inputs.OutputHandle)
			}
			add(resource.Route, r.Name(), in)
			deps = append(deps, &resource.Dependency{Parent: child, Child: resource.Key(resource.Route, r.Name())})
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Key() < rs[j].Key() })
	sort.Slice(deps, func(i, j int) bool {
		if deps[i].Child != deps[j].Child {
			return deps[i].Child < deps[j].Child
		}
		return deps[i].Parent < deps[j].Parent
	})
	return rs, deps
}

// Graph builds the project's checked resource graph.
func (p *Project) Graph() (*graph.Graph, error) {
	return graph.New(p.Resources())
}

// ref writes a canonical reference to an output.
func ref(typ resource.Kind, name, output string) string {
	return resource.Ref{Key: resource.Key(typ, name), Output: output}.String()
}

func eggInputsOf(e *Egg) inputs.Egg {
	in := inputs.Egg{
		Image:       e.Image,
		Pull:        string(e.Pull),
		Replicas:    e.Replicas,
		Command:     orEmpty(e.Command),
		Entrypoint:  orEmpty(e.Entrypoint),
		User:        e.User,
		WorkingDir:  e.WorkingDir,
		Port:        e.Port,
		Ports:       []inputs.Port{},
		Env:         orEmptyMap(e.Env),
		Aliases:     orEmpty(e.Aliases),
		Restart:     string(e.Restart),
		Resources:   inputs.Resources(e.Resources),
		Volumes:     []inputs.Mount{},
		Tmpfs:       orEmpty(e.Tmpfs),
		ReadOnly:    e.ReadOnly,
		CapAdd:      orEmpty(e.CapAdd),
		CapDrop:     orEmpty(e.CapDrop),
		Labels:      orEmptyMap(e.Labels),
		Secrets:     []inputs.SecretMount{},
		Networks:    []string{},
		StopSignal:  e.StopSignal,
		StopTimeout: formatDuration(e.StopTimeout),
		Placement:   placementOf(e),
		Schedule:    e.Schedule,
		Uses:        usesOf(e),
		Rollout: inputs.Rollout{
			Order:            string(e.Rollout.Order),
			MaxSurge:         e.Rollout.MaxSurge,
			MinReady:         formatDuration(e.Rollout.MinReady),
			DrainTimeout:     formatDuration(e.Rollout.DrainTimeout),
			ProgressDeadline: formatDuration(e.Rollout.ProgressDeadline),
			AutoRevert:       e.Rollout.AutoRevert,
		},
	}
	if b := e.Build; b != nil {
		in.Build = &inputs.Build{Context: b.Context, Dockerfile: b.Dockerfile, Args: orEmptyMap(b.Args), Target: b.Target}
	}
	for _, pm := range e.Ports {
		in.Ports = append(in.Ports, inputs.Port{Published: pm.Published, Target: pm.Target, Protocol: pm.Protocol})
	}
	if h := e.Health; h != nil {
		in.Health = &inputs.Health{
			HTTP: h.HTTP, TCP: h.TCP, Cmd: orEmpty(h.Cmd),
			Interval: formatDuration(h.Interval), Timeout: formatDuration(h.Timeout),
			StartPeriod: formatDuration(h.StartPeriod), Retries: h.Retries,
		}
	}
	for _, m := range e.Volumes {
		source := m.Source
		if m.Type == MountVolume {
			source = ref(resource.Volume, m.Source, inputs.OutputName)
		}
		in.Volumes = append(in.Volumes, inputs.Mount{Type: string(m.Type), Source: source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	for _, s := range e.Secrets {
		in.Secrets = append(in.Secrets, inputs.SecretMount{Name: s, Handle: ref(resource.Secret, s, inputs.OutputHandle), Target: "/run/secrets/" + s})
	}
	for _, n := range e.Networks {
		in.Networks = append(in.Networks, ref(resource.Network, n, inputs.OutputName))
	}
	return in
}

// placementOf says where an egg may run: on the user's hosts, and on the
// host of its volume (its first one; the others follow that one). The eggs
// whose address it references do not constrain it: every host reaches them.
func placementOf(e *Egg) inputs.Placement {
	pl := inputs.Placement{Hosts: orEmpty(e.Placement.Hosts)}
	if vols := e.namedVolumes(); len(vols) > 0 {
		pl.Volume = vols[0]
		pl.VolumeHost = ref(resource.Volume, vols[0], inputs.OutputHost)
	}
	return pl
}

// usesOf returns the eggs whose address e references, sorted: those the hosts
// running e serve it (see inputs.Egg.Uses).
func usesOf(e *Egg) []string {
	uses := []string{}
	for _, r := range e.refs {
		typ, name, _ := resource.SplitKey(r.Key)
		if typ == resource.Egg && r.Output == inputs.OutputAddress && !slices.Contains(uses, name) {
			uses = append(uses, name)
		}
	}
	slices.Sort(uses)
	return uses
}

// volumeFor copies into a volume's inputs what its provider needs to choose
// the volume's host: the owning egg's placement and resources. A second
// volume of the same egg is placed on the host of the first, so that the egg
// can run beside both.
func volumeFor(v *Volume, owner *Egg) inputs.Volume {
	in := inputs.Volume{Labels: orEmptyMap(v.Labels), Placement: inputs.Placement{Hosts: []string{}}, Backup: v.Backup, Failover: v.Failover}
	if owner == nil {
		return in
	}
	in.Egg = owner.Name
	in.Resources = inputs.Resources(owner.Resources)
	in.Placement = placementOf(owner)
	if in.Placement.Volume == v.Name {
		in.Placement.Volume, in.Placement.VolumeHost = "", ""
	}
	return in
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func orEmptyMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// optionalDuration formats d, or gives "" for zero: a setting left to its
// default, absent from the inputs (and from their golden files).
func optionalDuration(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return formatDuration(d)
}
