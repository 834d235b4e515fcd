package provider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/hatchery/hatchery/internal/placement"
)

// The typed forms of the inputs package spec documents (its package doc is
// the contract). They are decoded from a resource's resolved inputs, so a
// reference is already replaced by the output it names: a volume source by the
// volume's name, a secret handle by the handle, beside hosts by a host list.

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
	Env         envInputs         `json:"env"`
	Health      *healthInputs     `json:"health"`
	Aliases     []string          `json:"aliases"`
	Rollout     rolloutInputs     `json:"rollout"`
	Restart     string            `json:"restart"`
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

// envInputs are environment values after resolution. A value that was one
// whole reference holds the output's own value, which may be a list
// (API_HOSTS: "${api.hosts}"); a container's environment holds strings, so a
// list becomes its items joined by commas and any other value its JSON.
type envInputs map[string]string

func (e *envInputs) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := make(envInputs, len(raw))
	for k, v := range raw {
		var s string
		var list []string
		switch {
		case json.Unmarshal(v, &s) == nil:
			out[k] = s
		case json.Unmarshal(v, &list) == nil:
			out[k] = strings.Join(list, ",")
		default:
			out[k] = string(v)
		}
	}
	*e = out
	return nil
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
	Order            string      `json:"order"`
	MaxSurge         surgeInputs `json:"max_surge"`
	MinReady         string      `json:"min_ready"`
	DrainTimeout     string      `json:"drain_timeout"`
	ProgressDeadline string      `json:"progress_deadline"`
	AutoRevert       bool        `json:"auto_revert"`
}

// surgeInputs is {count} or {percent} of a host's slots.
type surgeInputs struct {
	Count   int `json:"count"`
	Percent int `json:"percent"`
}

// slots is how many of a host's n slots roll at once, at least one.
func (s surgeInputs) slots(n int) int {
	if s.Count > 0 {
		return s.Count
	}
	if s.Percent > 0 {
		return max(1, n*s.Percent/100)
	}
	return 0 // the contract's default
}

type resourceInputs struct {
	Memory int64   `json:"memory"`
	CPUs   float64 `json:"cpus"`
	Pids   int64   `json:"pids"`
}

// request is what the scheduler counts of one replica.
func (r resourceInputs) request() placement.Resources {
	return placement.Resources{Memory: r.Memory, MilliCPU: int64(math.Round(r.CPUs * 1000))}
}

type mountInputs struct {
	Type     string `json:"type"`
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only"`
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

// besideInputs is an egg whose address this one references, and the hosts it
// runs on (the resolved ${egg/<name>.hosts}).
type besideInputs struct {
	Egg   string   `json:"egg"`
	Hosts []string `json:"hosts"`
}

type volumeInputs struct {
	Labels    map[string]string `json:"labels"`
	Egg       string            `json:"egg"`
	Placement placementInputs   `json:"placement"`
	Resources resourceInputs    `json:"resources"`
}

type routeInputs struct {
	Host string `json:"host"`
	Path string `json:"path"`
	Egg  string `json:"egg"`
	Port int    `json:"port"`
	// Hosts is where the egg runs (${egg/<name>.hosts}, still unresolved in a
	// preview): it makes the route an update when the egg moves. Not read:
	// the provider reads the egg's placement itself.
	Hosts any `json:"hosts"`
}

// decode turns resolved inputs into their typed form. Inputs that do not fit
// are the caller's bug (spec wrote them), so retrying cannot help: the error
// is permanent. An input field unknown here is refused, not dropped: the
// structs above mirror package spec's, and a field added there alone must
// fail loudly (TestSpecInputsDecode checks them against spec's output).
func decode[T any](key string, inputs map[string]any) (T, error) {
	var v T
	b, err := json.Marshal(inputs)
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		err = dec.Decode(&v)
	}
	if err != nil {
		return v, backoff.Permanent(fmt.Errorf("%s: inputs: %w", key, err))
	}
	return v, nil
}

// duration parses a duration input; "" is zero (the contract's default).
func duration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", field, err)
	}
	return d, nil
}
