package spec

import (
	"encoding/json"
	"sort"
	"strings"

	"github.com/hatchery/hatchery/internal/graph"
	"github.com/hatchery/hatchery/internal/resource"
)

// Resources maps the project to the reconciler's desired resources, sorted by
// key, and the explicit dependencies between them, sorted by child then
// parent. The other edges are references in the inputs, which graph.New adds.
// The package documentation describes every input.
func (p *Project) Resources() ([]*resource.Desired, []*resource.Dependency) {
	var rs []*resource.Desired
	var deps []*resource.Dependency
	add := func(typ, name string, inputs any) {
		rs = append(rs, &resource.Desired{Type: typ, Name: name, Inputs: toMap(inputs)})
	}
	for _, n := range p.Networks {
		add("network", n.Name, networkInputs{Internal: n.Internal, Labels: n.Labels})
	}
	for _, s := range p.Secrets {
		add("secret", s.Name, secretInputs{File: s.File, Env: s.Env})
	}
	owners := map[string]*Egg{} // volume -> the egg mounting it
	for _, e := range p.Eggs {
		for _, v := range e.namedVolumes() {
			owners[v] = e
		}
	}
	for _, v := range p.Volumes {
		add("volume", v.Name, volumeFor(v, owners[v.Name]))
	}
	for _, e := range p.Eggs {
		add("egg", e.Name, eggInputsOf(e))
		child := resource.Key("egg", e.Name)
		for _, d := range e.DependsOn {
			deps = append(deps, &resource.Dependency{Parent: resource.Key("egg", d.Egg), Child: child, Condition: d.Condition})
		}
		for _, r := range e.Routes {
			add("route", r.Name(), routeInputs{Host: r.Host, Path: r.Path, Egg: e.Name, Port: e.Port, Hosts: ref("egg", e.Name, "hosts")})
			deps = append(deps, &resource.Dependency{Parent: child, Child: resource.Key("route", r.Name())})
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
func ref(typ, name, output string) string {
	return resource.Ref{Key: resource.Key(typ, name), Output: output}.String()
}

// The input structs below are the contract between the loader and the
// providers (see the package documentation). Slices and maps are never nil,
// so that an unset list encodes as [] whatever loader produced it, and two
// loaders of the same project produce equal inputs.

type eggInputs struct {
	Build       *buildInputs      `json:"build"`
	Image       string            `json:"image"`
	Replicas    int               `json:"replicas"`
	Command     []string          `json:"command"`
	Entrypoint  []string          `json:"entrypoint"`
	User        string            `json:"user"`
	WorkingDir  string            `json:"working_dir"`
	Port        int               `json:"port"`
	Ports       []portInputs      `json:"ports"`
	Env         map[string]string `json:"env"`
	Health      *healthInputs     `json:"health"`
	Aliases     []string          `json:"aliases"`
	Rollout     rolloutInputs     `json:"rollout"`
	Restart     Restart           `json:"restart"`
	Resources   resourceInputs    `json:"resources"`
	Volumes     []mountInputs     `json:"volumes"`
	Tmpfs       []string          `json:"tmpfs"`
	ReadOnly    bool              `json:"read_only"`
	CapAdd      []string          `json:"cap_add"`
	CapDrop     []string          `json:"cap_drop"`
	Labels      map[string]string `json:"labels"`
	Secrets     []secretMount     `json:"secrets"`
	Networks    []string          `json:"networks"`
	StopSignal  string            `json:"stop_signal"`
	StopTimeout string            `json:"stop_timeout"`
	Placement   placementInputs   `json:"placement"`
}

type buildInputs struct {
	Context    string            `json:"context"`
	Dockerfile string            `json:"dockerfile"`
	Args       map[string]string `json:"args"`
	Target     string            `json:"target"`
}

type portInputs struct {
	Published int    `json:"published"`
	Target    int    `json:"target"`
	Protocol  string `json:"protocol"`
}

type healthInputs struct {
	HTTP        string   `json:"http"`
	TCP         bool     `json:"tcp"`
	Cmd         []string `json:"cmd"`
	Interval    string   `json:"interval"`
	Timeout     string   `json:"timeout"`
	StartPeriod string   `json:"start_period"`
	Retries     int      `json:"retries"`
}

type rolloutInputs struct {
	Order            Order  `json:"order"`
	MaxSurge         Surge  `json:"max_surge"`
	MinReady         string `json:"min_ready"`
	DrainTimeout     string `json:"drain_timeout"`
	ProgressDeadline string `json:"progress_deadline"`
	AutoRevert       bool   `json:"auto_revert"`
}

type resourceInputs struct {
	Memory int64   `json:"memory"`
	CPUs   float64 `json:"cpus"`
	Pids   int64   `json:"pids"`
}

type mountInputs struct {
	Type     MountType `json:"type"`
	Source   string    `json:"source"`
	Target   string    `json:"target"`
	ReadOnly bool      `json:"read_only"`
}

type secretMount struct {
	Name   string `json:"name"`
	Handle string `json:"handle"`
	Target string `json:"target"`
}

type placementInputs struct {
	Hosts      []string       `json:"hosts"`
	Volume     string         `json:"volume"`
	VolumeHost string         `json:"volume_host"`
	Beside     []besideInputs `json:"beside"`
}

// besideInputs names an egg whose address the egg references, and where it
// runs (a reference resolved to a list of host IDs).
type besideInputs struct {
	Egg   string `json:"egg"`
	Hosts string `json:"hosts"`
}

type volumeInputs struct {
	Labels    map[string]string `json:"labels"`
	Egg       string            `json:"egg"`
	Placement placementInputs   `json:"placement"`
	Resources resourceInputs    `json:"resources"`
}

type networkInputs struct {
	Internal bool              `json:"internal"`
	Labels   map[string]string `json:"labels"`
}

type secretInputs struct {
	File string `json:"file,omitempty"`
	Env  string `json:"env,omitempty"`
}

type routeInputs struct {
	Host  string `json:"host"`
	Path  string `json:"path"`
	Egg   string `json:"egg"`
	Port  int    `json:"port"`
	Hosts string `json:"hosts"`
}

func eggInputsOf(e *Egg) eggInputs {
	in := eggInputs{
		Image:       e.Image,
		Replicas:    e.Replicas,
		Command:     orEmpty(e.Command),
		Entrypoint:  orEmpty(e.Entrypoint),
		User:        e.User,
		WorkingDir:  e.WorkingDir,
		Port:        e.Port,
		Ports:       []portInputs{},
		Env:         orEmptyMap(e.Env),
		Aliases:     orEmpty(e.Aliases),
		Restart:     e.Restart,
		Resources:   resourceInputs(e.Resources),
		Volumes:     []mountInputs{},
		Tmpfs:       orEmpty(e.Tmpfs),
		ReadOnly:    e.ReadOnly,
		CapAdd:      orEmpty(e.CapAdd),
		CapDrop:     orEmpty(e.CapDrop),
		Labels:      orEmptyMap(e.Labels),
		Secrets:     []secretMount{},
		Networks:    []string{},
		StopSignal:  e.StopSignal,
		StopTimeout: formatDuration(e.StopTimeout),
		Placement:   placementOf(e),
		Rollout: rolloutInputs{
			Order:            e.Rollout.Order,
			MaxSurge:         e.Rollout.MaxSurge,
			MinReady:         formatDuration(e.Rollout.MinReady),
			DrainTimeout:     formatDuration(e.Rollout.DrainTimeout),
			ProgressDeadline: formatDuration(e.Rollout.ProgressDeadline),
			AutoRevert:       e.Rollout.AutoRevert,
		},
	}
	if b := e.Build; b != nil {
		in.Build = &buildInputs{Context: b.Context, Dockerfile: b.Dockerfile, Args: orEmptyMap(b.Args), Target: b.Target}
	}
	for _, pm := range e.Ports {
		in.Ports = append(in.Ports, portInputs{Published: pm.Published, Target: pm.Target, Protocol: pm.Protocol})
	}
	if h := e.Health; h != nil {
		in.Health = &healthInputs{
			HTTP: h.HTTP, TCP: h.TCP, Cmd: orEmpty(h.Cmd),
			Interval: formatDuration(h.Interval), Timeout: formatDuration(h.Timeout),
			StartPeriod: formatDuration(h.StartPeriod), Retries: h.Retries,
		}
	}
	for _, m := range e.Volumes {
		source := m.Source
		if m.Type == MountVolume {
			source = ref("volume", m.Source, "name")
		}
		in.Volumes = append(in.Volumes, mountInputs{Type: m.Type, Source: source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	for _, s := range e.Secrets {
		in.Secrets = append(in.Secrets, secretMount{Name: s, Handle: ref("secret", s, "handle"), Target: "/run/secrets/" + s})
	}
	for _, n := range e.Networks {
		in.Networks = append(in.Networks, ref("network", n, "name"))
	}
	return in
}

// placementOf says where an egg may run: on the user's hosts, on the host of
// its volume (its first one; the others follow that one), and beside the eggs
// whose address it references (until cross-host addressing exists).
func placementOf(e *Egg) placementInputs {
	pl := placementInputs{Hosts: orEmpty(e.Placement.Hosts), Beside: []besideInputs{}}
	if vols := e.namedVolumes(); len(vols) > 0 {
		pl.Volume = vols[0]
		pl.VolumeHost = ref("volume", vols[0], "host")
	}
	seen := map[string]bool{}
	for _, r := range e.refs {
		name, isEgg := strings.CutPrefix(r.Key, "egg/")
		if isEgg && r.Output == "address" && !seen[name] {
			seen[name] = true
			pl.Beside = append(pl.Beside, besideInputs{Egg: name, Hosts: ref("egg", name, "hosts")})
		}
	}
	sort.Slice(pl.Beside, func(i, j int) bool { return pl.Beside[i].Egg < pl.Beside[j].Egg })
	return pl
}

// volumeFor copies into a volume's inputs what its provider needs to choose
// the volume's host: the owning egg's placement and resources. A second
// volume of the same egg is placed on the host of the first, so that the egg
// can run beside both.
func volumeFor(v *Volume, owner *Egg) volumeInputs {
	in := volumeInputs{Labels: orEmptyMap(v.Labels), Placement: placementInputs{Hosts: []string{}, Beside: []besideInputs{}}}
	if owner == nil {
		return in
	}
	in.Egg = owner.Name
	in.Resources = resourceInputs(owner.Resources)
	in.Placement = placementOf(owner)
	if in.Placement.Volume == v.Name {
		in.Placement.Volume, in.Placement.VolumeHost = "", ""
	}
	return in
}

// toMap turns an inputs struct into the JSON-compatible map the resource
// package works with. It cannot fail: the structs hold only strings, finite
// numbers, booleans, slices and maps.
func toMap(v any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		panic("spec: encode inputs: " + err.Error())
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic("spec: decode inputs: " + err.Error())
	}
	return m
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
