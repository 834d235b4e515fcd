package placement

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestPlace(t *testing.T) {
	small := res(256*MiB, 250)
	half := res(512*MiB, 500)
	tests := []struct {
		name         string
		hosts        []Host
		egg          Egg
		now          time.Time // t0 if zero
		want         map[string]int
		wantUnplaced int
		wantWaiting  string // a substring of Decision.Waiting; "" wants none
	}{
		// Spread.
		{
			name:  "spreads replicas one per host before doubling up",
			hosts: []Host{host("a", 8, 4), host("b", 8, 4), host("c", 8, 4)},
			egg:   egg(4, half),
			want:  map[string]int{"a": 2, "b": 1, "c": 1},
		},
		{
			name:  "the first replica goes to the least loaded host",
			hosts: []Host{host("a", 8, 4, used(4*GiB, 0)), host("b", 8, 4, used(1*GiB, 0)), host("c", 8, 4, used(2*GiB, 0))},
			egg:   egg(1, small),
			want:  map[string]int{"b": 1},
		},
		{
			name:  "equal hosts are taken by name, whatever their order",
			hosts: []Host{host("c", 8, 4), host("b", 8, 4), host("a", 8, 4)},
			egg:   egg(1, small),
			want:  map[string]int{"a": 1},
		},
		{
			name:  "spreading comes before load: a big empty host gets one replica, not all",
			hosts: []Host{host("a", 64, 16), host("b", 8, 4, used(2*GiB, 0))},
			egg:   egg(2, half),
			want:  map[string]int{"a": 1, "b": 1},
		},
		{
			name: "load is the larger of the memory and CPU shares",
			// a: 12.5% of memory but 75% of CPU; b: 50% and 25%. b is less loaded.
			hosts: []Host{host("a", 8, 4, used(1*GiB, 3000)), host("b", 8, 4, used(4*GiB, 1000))},
			egg:   egg(1, res(64*MiB, 10)),
			want:  map[string]int{"b": 1},
		},
		{
			name:  "an egg that requests nothing still spreads",
			hosts: []Host{host("a", 8, 4), host("b", 8, 4), host("c", 8, 4)},
			egg:   egg(3, Resources{}),
			want:  map[string]int{"a": 1, "b": 1, "c": 1},
		},

		// Capacity.
		{
			name:  "a host without room is skipped even when less loaded",
			hosts: []Host{host("a", 1, 4, used(900*MiB, 0)), host("b", 8, 4, used(6*GiB, 0))},
			egg:   egg(1, half),
			want:  map[string]int{"b": 1},
		},
		{
			name:  "CPU counts for room as memory does",
			hosts: []Host{host("a", 8, 1, used(0, 800)), host("b", 8, 4, used(6*GiB, 0))},
			egg:   egg(1, half),
			want:  map[string]int{"b": 1},
		},
		{
			name: "replicas double up when the other hosts are full",
			// a has room for one 512 MiB replica only.
			hosts: []Host{host("a", 1, 4, used(400*MiB, 0)), host("b", 4, 4)},
			egg:   egg(3, half),
			want:  map[string]int{"a": 1, "b": 2},
		},
		{
			name:         "places what fits and counts the rest unplaced",
			hosts:        []Host{host("a", 1, 4)},
			egg:          egg(3, half),
			want:         map[string]int{"a": 2},
			wantUnplaced: 1,
		},

		// Constraints.
		{
			name:  "placement.hosts limits the hosts, however loaded",
			hosts: []Host{host("a", 8, 4), host("b", 8, 4), host("c", 8, 4, used(6*GiB, 0))},
			egg:   egg(2, small, placement("c")),
			want:  map[string]int{"c": 2},
		},
		{
			// web references db's address; every host reaches db, so db's
			// host is only one of web's hosts, and web's current slots there
			// (where it was once pinned beside db) stay put.
			name: "an egg spreads over every host whichever one runs the eggs it references",
			hosts: []Host{host("a", 8, 4), host("b", 8, 4, func(h *Host) {
				h.Placed = append(h.Placed, Allocation{Workload: "default/shop/db", Slots: 1, PerSlot: small})
			}), host("c", 8, 4)},
			egg:  egg(6, small, current(map[string]int{"b": 3})),
			want: map[string]int{"a": 2, "b": 3, "c": 1},
		},
		{
			name:  "a placement change moves replicas off the excluded hosts",
			hosts: []Host{host("a", 8, 4), host("b", 8, 4), host("c", 8, 4)},
			egg:   egg(2, small, placement("b", "c"), current(map[string]int{"a": 1, "b": 1})),
			want:  map[string]int{"b": 1, "c": 1},
		},

		// Stateful eggs.
		{
			name:  "a stateful egg goes to its volume's host, however loaded",
			hosts: []Host{host("a", 8, 4), host("b", 8, 4, used(6*GiB, 0))},
			egg:   egg(1, half, volumeOn("pgdata", "b")),
			want:  map[string]int{"b": 1},
		},
		{
			name:        "a stateful egg waits on its volume's host while it is down, and says why",
			hosts:       []Host{host("a", 8, 4), host("b", 8, 4, downSince(t0.Add(-time.Minute)))},
			egg:         egg(1, half, volumeOn("pgdata", "b"), current(map[string]int{"b": 1})),
			want:        map[string]int{"b": 1},
			wantWaiting: "waiting for host b, which holds volume pgdata and is down since 2025-01-02T15:03:05Z",
		},
		{
			name:        "a new stateful egg is assigned to its down volume host and waits",
			hosts:       []Host{host("a", 8, 4), host("b", 8, 4, downSince(t0.Add(-time.Minute)))},
			egg:         egg(1, half, volumeOn("pgdata", "b")),
			want:        map[string]int{"b": 1},
			wantWaiting: "waiting for host b",
		},
		{
			name:        "a stateful egg waits on a volume host in state unknown",
			hosts:       []Host{host("a", 8, 4), host("b", 8, 4, unknown)},
			egg:         egg(1, half, volumeOn("pgdata", "b"), current(map[string]int{"b": 1})),
			want:        map[string]int{"b": 1},
			wantWaiting: "has not reported since the server started",
		},
		{
			name:         "a stateful egg whose volume host was removed waits without a slot",
			hosts:        []Host{host("a", 8, 4), host("b", 8, 4, removed)},
			egg:          egg(1, half, volumeOn("pgdata", "b"), current(map[string]int{"b": 1})),
			want:         map[string]int{},
			wantUnplaced: 1,
			wantWaiting:  "volume pgdata lives on host b, which was removed",
		},
		{
			name:  "a stateful egg on a volume host down past the delay is not moved",
			hosts: []Host{host("a", 8, 4), host("b", 8, 4, downSince(t0.Add(-time.Hour)))},
			egg:   egg(1, half, volumeOn("pgdata", "b"), current(map[string]int{"b": 1})),
			want:  map[string]int{"b": 1}, wantWaiting: "down since",
		},

		// Stability and scaling.
		{
			name:  "an unchanged egg on unchanged hosts moves nothing, even unbalanced",
			hosts: []Host{host("a", 8, 4, used(4*GiB, 0)), host("b", 8, 4), host("c", 8, 4)},
			egg:   egg(3, small, current(map[string]int{"a": 2, "c": 1})),
			want:  map[string]int{"a": 2, "c": 1},
		},
		{
			name:  "scale-up adds on the least loaded host",
			hosts: []Host{host("a", 8, 4, used(2*GiB, 0)), host("b", 8, 4), host("c", 8, 4, used(1*GiB, 0))},
			egg:   egg(4, small, current(map[string]int{"a": 1, "b": 1, "c": 1})),
			want:  map[string]int{"a": 1, "b": 2, "c": 1},
		},
		{
			name:  "scale-down removes from the most loaded host",
			hosts: []Host{host("a", 8, 4, used(2*GiB, 0)), host("b", 8, 4), host("c", 8, 4, used(3*GiB, 0))},
			egg:   egg(2, small, current(map[string]int{"a": 1, "b": 1, "c": 1})),
			want:  map[string]int{"a": 1, "b": 1},
		},
		{
			name:  "scale-down removes from the host with the most replicas first",
			hosts: []Host{host("a", 8, 4), host("b", 8, 4, used(4*GiB, 0))},
			egg:   egg(2, small, current(map[string]int{"a": 2, "b": 1})),
			want:  map[string]int{"a": 1, "b": 1},
		},
		{
			name:  "scale-down removes the replicas of a host that is not live first",
			hosts: []Host{host("a", 8, 4, used(4*GiB, 0)), host("b", 8, 4, downSince(t0.Add(-time.Second))), host("c", 8, 4)},
			egg:   egg(2, small, current(map[string]int{"a": 1, "b": 1, "c": 1})),
			want:  map[string]int{"a": 1, "c": 1},
		},
		{
			name:  "a cold egg (zero replicas) is placed nowhere",
			hosts: []Host{host("a", 8, 4)},
			egg:   egg(0, small, current(map[string]int{"a": 1})),
			want:  map[string]int{},
		},
		{
			name: "the egg's own entries among a host's workloads are not counted twice",
			hosts: []Host{host("a", 2, 4, func(h *Host) {
				h.Placed = append(h.Placed, Allocation{Workload: "default/shop/web", Slots: 2, PerSlot: res(1*GiB, 0)})
			})},
			egg:  egg(2, res(1*GiB, 0), current(map[string]int{"a": 2})),
			want: map[string]int{"a": 2},
		},
		{
			name: "replicas that no longer fit after the request grew move",
			// a has room for one 1.5 GiB replica, no longer two.
			hosts: []Host{host("a", 2, 4), host("b", 8, 4)},
			egg:   egg(3, res(1536*MiB, 0), current(map[string]int{"a": 2, "b": 1})),
			want:  map[string]int{"a": 1, "b": 2},
		},

		// Liveness and rescheduling.
		{
			name:  "a host down for less than the reschedule delay keeps its replicas",
			hosts: []Host{host("a", 8, 4), host("b", 8, 4, downSince(t0.Add(-1999*time.Millisecond))), host("c", 8, 4)},
			egg:   egg(3, small, current(map[string]int{"a": 1, "b": 1, "c": 1})),
			want:  map[string]int{"a": 1, "b": 1, "c": 1},
		},
		{
			name:  "a host down for the reschedule delay has its replicas moved to the least loaded",
			hosts: []Host{host("a", 8, 4, used(1*GiB, 0)), host("b", 8, 4, downSince(t0.Add(-2*time.Second))), host("c", 8, 4)},
			egg:   egg(3, small, current(map[string]int{"a": 1, "b": 1, "c": 1})),
			want:  map[string]int{"a": 1, "c": 2},
		},
		{
			name:  "a removed host has its replicas moved at once",
			hosts: []Host{host("a", 8, 4), host("b", 8, 4, removed), host("c", 8, 4)},
			egg:   egg(2, small, current(map[string]int{"a": 1, "b": 1})),
			want:  map[string]int{"a": 1, "c": 1},
		},
		{
			name:  "a host no longer listed has its replicas moved",
			hosts: []Host{host("a", 8, 4), host("b", 8, 4)},
			egg:   egg(2, small, current(map[string]int{"a": 1, "gone": 1})),
			want:  map[string]int{"a": 1, "b": 1},
		},
		{
			name: "a down host's replicas stay there when no live host has room",
			// a has room for one replica only.
			hosts: []Host{host("a", 1, 4, used(512*MiB, 0)), host("b", 8, 4, downSince(t0.Add(-time.Hour)))},
			egg:   egg(3, half, current(map[string]int{"a": 1, "b": 2})),
			want:  map[string]int{"a": 1, "b": 2},
		},
		{
			name:         "a removed host's replicas are unplaced when no live host has room",
			hosts:        []Host{host("a", 1, 4, used(512*MiB, 0)), host("b", 8, 4, removed)},
			egg:          egg(3, half, current(map[string]int{"a": 1, "b": 2})),
			want:         map[string]int{"a": 1},
			wantUnplaced: 2,
		},
		{
			name: "a host in state unknown keeps its replicas and gets no new ones",
			// a is the least loaded and would get the fourth replica if it were live.
			hosts: []Host{host("a", 8, 4, unknown), host("b", 8, 4, used(2*GiB, 0)), host("c", 8, 4, used(4*GiB, 0))},
			egg:   egg(4, small, current(map[string]int{"a": 1})),
			want:  map[string]int{"a": 1, "b": 2, "c": 1},
		},
		{
			name:  "a host down within the delay gets no new replicas",
			hosts: []Host{host("a", 8, 4, downSince(t0.Add(-time.Second))), host("b", 8, 4, used(2*GiB, 0))},
			egg:   egg(2, small),
			want:  map[string]int{"b": 2},
		},
	}
	s := newScheduler(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := tt.now
			if now.IsZero() {
				now = t0
			}
			d, err := s.Place(context.Background(), tt.egg, tt.hosts, now)
			if err != nil {
				t.Fatalf("Place: %v", err)
			}
			if got := byName(d.Slots, tt.hosts); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("slots = %v, want %v\n%s", got, tt.want, d.String())
			}
			if d.Unplaced != tt.wantUnplaced {
				t.Errorf("unplaced = %d, want %d", d.Unplaced, tt.wantUnplaced)
			}
			switch {
			case tt.wantWaiting == "" && d.Waiting != "":
				t.Errorf("waiting = %q, want none", d.Waiting)
			case !strings.Contains(d.Waiting, tt.wantWaiting):
				t.Errorf("waiting = %q, want it to contain %q", d.Waiting, tt.wantWaiting)
			}
		})
	}
}

func TestPlaceUnplaceable(t *testing.T) {
	half := res(512*MiB, 500)
	tests := []struct {
		name  string
		hosts []Host
		egg   Egg
		want  []string // substrings of the error, in order
	}{
		{
			name: "no host has joined",
			egg:  egg(1, half),
			want: []string{"egg web cannot be placed: no host has joined yet (start one with `hatch agent --join`)"},
		},
		{
			name: "no live host has room: the error names the need and every host's free amount",
			hosts: []Host{
				host("host-a", 1, 2, used(924*MiB, 0)),
				host("host-b", 8, 4, downSince(t0.Add(-time.Minute))),
				host("host-c", 8, 4),
			},
			egg: egg(1, half, placement("host-a", "host-b")),
			want: []string{"egg web needs 512 MiB and 0.5 CPU per replica; no live host has it free: " +
				"host-a: has 100 MiB and 2 CPUs free, needs 512 MiB and 0.5 CPU per replica; " +
				"host-b: is down since 2025-01-02T15:03:05Z, longer than the 2s reschedule delay; " +
				"host-c: is not in placement.hosts"},
		},
		{
			name:  "no host is live",
			hosts: []Host{host("host-a", 8, 4, unknown), host("host-b", 8, 4, downSince(t0.Add(-time.Second)))},
			egg:   egg(2, half),
			want: []string{"egg web cannot be placed: no live host may run it: ",
				"host-a: has not reported since the server started; keeps its replicas, takes no new ones; ",
				"host-b: is down since 2025-01-02T15:04:04Z; its replicas move at 2025-01-02T15:04:06Z if it is still down; takes no new replicas"},
		},
		{
			name:  "placement.hosts names a host that does not exist",
			hosts: []Host{host("host-a", 8, 4)},
			egg:   egg(1, half, placement("host-z")),
			want:  []string{"host-a: is not in placement.hosts; host-z: is named in placement.hosts, but no host has this name"},
		},
		{
			name:  "a stateful egg whose volume host is excluded by placement.hosts",
			hosts: []Host{host("host-a", 8, 4), host("host-b", 8, 4)},
			egg:   egg(1, half, volumeOn("pgdata", "host-a"), placement("host-b")),
			want:  []string{"egg db cannot be placed: volume pgdata lives on host host-a, which is not in placement.hosts [host-b]"},
		},
		{
			name:  "a stateful egg whose volume host lacks room",
			hosts: []Host{host("host-a", 2, 4, used(1*GiB, 0)), host("host-b", 8, 4)},
			egg:   egg(1, res(2*GiB, 0), volumeOn("pgdata", "host-a")),
			want:  []string{"egg db cannot be placed: it needs 2 GiB per replica and host host-a, which holds volume pgdata, has 1 GiB free"},
		},
	}
	s := newScheduler(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := s.Place(context.Background(), tt.egg, tt.hosts, t0)
			if err == nil {
				t.Fatalf("Place succeeded with %v, want an error", d.Slots)
			}
			var ue *UnplaceableError
			if !errors.As(err, &ue) {
				t.Fatalf("error %v is a %T, want *UnplaceableError", err, err)
			}
			if ue.Egg != tt.egg.Name || len(ue.Hosts) < len(tt.hosts) {
				t.Errorf("error carries egg %q and %d explanations, want %q and one per host", ue.Egg, len(ue.Hosts), tt.egg.Name)
			}
			msg := err.Error()
			for _, want := range tt.want {
				i := strings.Index(msg, want)
				if i < 0 {
					t.Fatalf("error\n%s\ndoes not contain\n%s", err, want)
				}
				msg = msg[i+len(want):]
			}
		})
	}
}

func TestPlaceRejectsInvalidInput(t *testing.T) {
	tests := []struct {
		name  string
		hosts []Host
		egg   Egg
	}{
		{"an egg without a name", nil, Egg{Replicas: 1}},
		{"negative replicas", nil, egg(-1, Resources{})},
		{"a negative request", nil, egg(1, res(-1, 0))},
		{"a negative current slot count", []Host{host("a", 1, 1)}, egg(1, Resources{}, current(map[string]int{"a": -1}))},
		{"a stateful egg whose volume has no host", nil, egg(1, Resources{}, func(e *Egg) { e.Volume = "pgdata" })},
		{"a host without an ID", []Host{{Name: "a", State: HostLive}}, egg(1, Resources{})},
		{"two hosts with one ID", []Host{host("a", 1, 1), host("a", 1, 1)}, egg(1, Resources{})},
		{"a down host without DownSince", []Host{host("a", 1, 1, func(h *Host) { h.State = HostDown })}, egg(1, Resources{})},
		{"a host state nobody knows", []Host{host("a", 1, 1, func(h *Host) { h.State = "sleepy" })}, egg(1, Resources{})},
		{"a negative capacity", []Host{host("a", -1, 1)}, egg(1, Resources{})},
		{"a negative allocation", []Host{host("a", 1, 1, used(-1, 0))}, egg(1, Resources{})},
	}
	s := newScheduler(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Place(context.Background(), tt.egg, tt.hosts, t0)
			if !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("Place = %v, want an error wrapping ErrInvalidInput", err)
			}
		})
	}
}

func TestConfig(t *testing.T) {
	if got := DefaultConfig().RescheduleDelay; got != 2*time.Second {
		t.Errorf("default reschedule delay = %v, want 2s", got)
	}
	if _, err := New(Config{RescheduleDelay: -time.Second}); err == nil {
		t.Error("New accepted a negative reschedule delay")
	}
	// A zero delay is a valid policy: reschedule as soon as a host is down.
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	hosts := []Host{host("a", 8, 4, downSince(t0)), host("b", 8, 4)}
	d, err := s.Place(context.Background(), egg(1, Resources{}, current(map[string]int{"a": 1})), hosts, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got := byName(d.Slots, hosts); !reflect.DeepEqual(got, map[string]int{"b": 1}) {
		t.Errorf("with no delay, slots = %v, want the replica moved to b", got)
	}
}

// TestHostComesBack walks one host through down, past the delay and back:
// nothing moves during the delay, its replica moves after it, and nothing
// moves back (or is added) when it returns.
func TestHostComesBack(t *testing.T) {
	s := newScheduler(t)
	hosts := []Host{host("a", 8, 4), host("b", 8, 4), host("c", 8, 4, used(1*GiB, 0))}
	web := egg(3, res(256*MiB, 250))
	place := func(step string, now time.Time) Decision {
		t.Helper()
		d, err := s.Place(context.Background(), web, hosts, now)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if d.Total() != 3 {
			t.Fatalf("%s: %d slots placed, want 3\n%s", step, d.Total(), d.String())
		}
		asCurrent(d.Slots)(&web)
		return d
	}
	before := place("all live", t0)
	if got := byName(before.Slots, hosts); !reflect.DeepEqual(got, map[string]int{"a": 1, "b": 1, "c": 1}) {
		t.Fatalf("all live: slots = %v", got)
	}

	downAt := t0.Add(time.Minute)
	downSince(downAt)(&hosts[1])
	grace := place("b down 1s", downAt.Add(time.Second))
	if !reflect.DeepEqual(grace.Slots, before.Slots) {
		t.Fatalf("b down for 1s: slots = %v, want unchanged %v", grace.Slots, before.Slots)
	}
	if e := explanationFor(t, grace.Hosts, "b"); e.Reason != ReasonDownGrace || e.Slots != 1 {
		t.Errorf("b down for 1s: explanation %+v", e)
	}

	moved := place("b down 3s", downAt.Add(3*time.Second))
	if got := byName(moved.Slots, hosts); !reflect.DeepEqual(got, map[string]int{"a": 2, "c": 1}) {
		t.Fatalf("b down for 3s: slots = %v, want b's replica on a (less loaded than c)", got)
	}
	if e := explanationFor(t, moved.Hosts, "b"); e.Reason != ReasonDown || !strings.HasSuffix(e.Detail, ": gives up 1 replica") {
		t.Errorf("b down for 3s: explanation %+v", e)
	}

	hosts[1].State, hosts[1].DownSince = HostLive, time.Time{}
	back := place("b back", downAt.Add(time.Hour))
	if !reflect.DeepEqual(back.Slots, moved.Slots) {
		t.Fatalf("b back: slots = %v, want unchanged %v (no flapping)", back.Slots, moved.Slots)
	}
	if e := explanationFor(t, back.Hosts, "b"); e.Reason != ReasonSpare || e.Slots != 0 {
		t.Errorf("b back: explanation %+v, want a spare host", e)
	}
}

func TestExplanations(t *testing.T) {
	s := newScheduler(t)
	hosts := []Host{
		host("a", 8, 4),
		host("b", 8, 4, used(7*GiB+512*MiB, 0)),
		host("c", 8, 4, used(2*GiB, 0)),
		host("d", 8, 4, unknown),
		host("e", 8, 4, downSince(t0.Add(-time.Minute))),
		host("f", 8, 4, removed),
		host("g", 8, 4),
		host("h", 8, 4, used(5*GiB, 0)),
	}
	d, err := s.Place(context.Background(), egg(3, res(1*GiB, 500), placement("a", "b", "c", "d", "e", "f", "h", "x"),
		current(map[string]int{"a": 1, "d": 1, "e": 1, "f": 1})), hosts, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		host   string
		reason Reason
		slots  int
		detail string
	}{
		{"a", ReasonPlaced, 1, "live, 12% of memory and 12% of CPU requested: keeps 1 replica"},
		{"b", ReasonFull, 0, "has 512 MiB and 4 CPUs free, needs 1 GiB and 0.5 CPU per replica"},
		{"c", ReasonPlaced, 1, "live, 38% of memory and 12% of CPU requested: gets 1 new replica"},
		{"d", ReasonUnknown, 1, "has not reported since the server started; keeps its replicas, takes no new ones: keeps 1 replica"},
		{"e", ReasonDown, 0, "is down since 2025-01-02T15:03:05Z, longer than the 2s reschedule delay: gives up 1 replica"},
		{"f", ReasonRemoved, 0, "was removed: gives up 1 replica"},
		{"g", ReasonNotInPlacement, 0, "is not in placement.hosts"},
		{"h", ReasonSpare, 0, "live with room, 62% of memory and 0% of CPU requested; other hosts came first"},
		{"x", ReasonNoSuchHost, 0, "is named in placement.hosts, but no host has this name"},
	}
	if len(d.Hosts) != len(want) {
		t.Fatalf("%d explanations, want %d:\n%s", len(d.Hosts), len(want), d.String())
	}
	for i, w := range want {
		got := d.Hosts[i]
		if got.Host != w.host || got.Reason != w.reason || got.Slots != w.slots || got.Detail != w.detail {
			t.Errorf("explanation %d = %+v\nwant host %s, reason %s, %d slots, detail %q", i, got, w.host, w.reason, w.slots, w.detail)
		}
	}
	if !strings.HasPrefix(d.String(), "a: live, 12% of memory") {
		t.Errorf("String() = %q", d.String())
	}
}

func TestFormat(t *testing.T) {
	for _, tt := range []struct {
		got, want string
	}{
		{FormatBytes(512 * MiB), "512 MiB"},
		{FormatBytes(1536 * MiB), "1.5 GiB"},
		{FormatBytes(100*MiB + 1), "100 MiB"},
		{FormatBytes(2 * GiB), "2 GiB"},
		{FormatBytes(4 << 40), "4 TiB"},
		{FormatBytes(1000), "1000 B"},
		{FormatBytes(0), "0 B"},
		{FormatCPU(500), "0.5 CPU"},
		{FormatCPU(1000), "1 CPU"},
		{FormatCPU(2500), "2.5 CPUs"},
		{res(0, 0).String(), "nothing"},
		{res(256*MiB, 0).String(), "256 MiB"},
		{res(0, 250).String(), "0.25 CPU"},
		{res(GiB, 2000).String(), "1 GiB and 2 CPUs"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

// TestPlaceStopsWhenItsContextIsDone: placing a billion replicas (or
// removing them) takes seconds of CPU; a done context ends it at once.
func TestPlaceStopsWhenItsContextIsDone(t *testing.T) {
	s := newScheduler(t)
	hosts := []Host{host("a", 1<<40, 1<<30), host("b", 1<<40, 1<<30)}
	for name, e := range map[string]Egg{
		"scale up":   egg(1_000_000_000, Resources{}),
		"scale down": egg(0, Resources{}, current(map[string]int{"a": 1_000_000_000})),
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := s.Place(ctx, e, hosts, t0)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Place = %v, want the context's deadline", err)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Fatalf("Place took %v after its deadline of 20ms", took)
			}
		})
	}
}
