package placement

import (
	"testing"
	"time"
)

const (
	MiB = int64(1) << 20
	GiB = int64(1) << 30
)

// t0 is the tests' "now" unless a case says otherwise.
var t0 = time.Date(2025, 1, 2, 15, 4, 5, 0, time.UTC)

// host builds a live host named name with ID "id-"+name (IDs differ from names
// so a mix-up between the two shows), memGiB GiB of memory and cpus CPUs.
func host(name string, memGiB, cpus int64, opts ...func(*Host)) Host {
	h := Host{ID: "id-" + name, Name: name, State: HostLive,
		Capacity: Resources{Memory: memGiB * GiB, MilliCPU: cpus * 1000}}
	for _, o := range opts {
		o(&h)
	}
	return h
}

func downSince(t time.Time) func(*Host) {
	return func(h *Host) { h.State, h.DownSince = HostDown, t }
}

func unknown(h *Host) { h.State = HostUnknown }

func removed(h *Host) { h.Removed = true }

// used adds another workload's allocation of memory and milli-CPU to a host.
func used(mem, milliCPU int64) func(*Host) {
	return func(h *Host) {
		h.Placed = append(h.Placed, Allocation{Workload: "default/other/" + h.Name, Slots: 1,
			PerSlot: Resources{Memory: mem, MilliCPU: milliCPU}})
	}
}

// egg builds a stateless egg "web" in default/shop.
func egg(replicas int, per Resources, opts ...func(*Egg)) Egg {
	e := Egg{Namespace: "default", Project: "shop", Name: "web", Replicas: replicas, PerReplica: per}
	for _, o := range opts {
		o(&e)
	}
	return e
}

// current sets the egg's current placement, given by host name ("id-"+name).
func current(byName map[string]int) func(*Egg) {
	return func(e *Egg) {
		e.Current = map[string]int{}
		for name, n := range byName {
			e.Current["id-"+name] = n
		}
	}
}

func placement(names ...string) func(*Egg) {
	return func(e *Egg) { e.Placement = names }
}

func volumeOn(volume, name string) func(*Egg) {
	return func(e *Egg) { e.Name, e.Volume, e.VolumeHost = "db", volume, "id-"+name }
}

func res(mem, milliCPU int64) Resources { return Resources{Memory: mem, MilliCPU: milliCPU} }

// byName turns a decision's slots into host name -> slots, for readable
// comparisons; a host that is not listed keeps its ID.
func byName(slots map[string]int, hosts []Host) map[string]int {
	names := map[string]string{}
	for _, h := range hosts {
		names[h.ID] = h.Name
	}
	out := map[string]int{}
	for id, n := range slots {
		if name, ok := names[id]; ok {
			out[name] = n
		} else {
			out[id] = n
		}
	}
	return out
}

// asCurrent turns a decision's slots into the egg's next current placement.
func asCurrent(slots map[string]int) func(*Egg) {
	return func(e *Egg) {
		e.Current = map[string]int{}
		for id, n := range slots {
			e.Current[id] = n
		}
	}
}

func newScheduler(t testing.TB) *Scheduler {
	t.Helper()
	s, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func explanationFor(t testing.TB, d []Explanation, name string) Explanation {
	t.Helper()
	for _, e := range d {
		if e.Host == name {
			return e
		}
	}
	t.Fatalf("no explanation for %s in %v", name, d)
	return Explanation{}
}
