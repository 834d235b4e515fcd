package placement

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestChooseVolumeHost(t *testing.T) {
	db := func(opts ...func(*Egg)) Egg {
		e := egg(1, res(1*GiB, 500), opts...)
		e.Name = "db"
		return e
	}
	tests := []struct {
		name       string
		hosts      []Host
		consumer   Egg
		want       string // host name
		wantDetail string
	}{
		{
			name:       "the least loaded live host with room",
			hosts:      []Host{host("a", 8, 4, used(4*GiB, 0)), host("b", 8, 4, used(1*GiB, 0)), host("c", 8, 4, used(2*GiB, 0))},
			consumer:   db(),
			want:       "b",
			wantDetail: "chosen for volume pgdata (least loaded), live, 25% of memory and 12% of CPU requested with db",
		},
		{
			name:       "a host the consumer already runs on comes first, so it does not move",
			hosts:      []Host{host("a", 8, 4), host("b", 8, 4, used(4*GiB, 0))},
			consumer:   db(current(map[string]int{"b": 1})),
			want:       "b",
			wantDetail: "chosen for volume pgdata (db runs there now)",
		},
		{
			name:     "a host the consumer runs on but without room for it is passed over",
			hosts:    []Host{host("a", 8, 4), host("b", 2, 4, used(1536*MiB, 0))},
			consumer: db(current(map[string]int{"b": 1})),
			want:     "a",
		},
		{
			name:     "placement.hosts narrows the choice",
			hosts:    []Host{host("a", 8, 4, used(4*GiB, 0)), host("b", 8, 4, used(6*GiB, 0)), host("c", 8, 4)},
			consumer: db(placement("a", "b")),
			want:     "a",
		},
		{
			name:     "hosts not live are passed over, however empty",
			hosts:    []Host{host("a", 8, 4, unknown), host("b", 8, 4, downSince(t0.Add(-time.Second))), host("c", 8, 4, used(6*GiB, 0))},
			consumer: db(),
			want:     "c",
		},
		{
			name:     "the consumer's own volume fields are ignored",
			hosts:    []Host{host("a", 8, 4)},
			consumer: db(func(e *Egg) { e.Volume = "pgdata" }),
			want:     "a",
		},
	}
	s := newScheduler(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := s.ChooseVolumeHost("pgdata", tt.consumer, tt.hosts, t0)
			if err != nil {
				t.Fatal(err)
			}
			if got := byName(map[string]int{c.HostID: 1}, tt.hosts); got[tt.want] != 1 {
				t.Fatalf("chose %v, want %s", got, tt.want)
			}
			e := explanationFor(t, c.Hosts, tt.want)
			if e.Reason != ReasonPlaced || !strings.HasPrefix(e.Detail, tt.wantDetail) {
				t.Errorf("chosen host's explanation = %+v, want reason placed and detail %q", e, tt.wantDetail)
			}
			if len(c.Hosts) != len(tt.hosts) {
				t.Errorf("%d explanations, want one per host", len(c.Hosts))
			}
		})
	}
}

func TestChooseVolumeHostErrors(t *testing.T) {
	s := newScheduler(t)
	hosts := []Host{host("host-a", 2, 4, used(1*GiB, 0)), host("host-b", 8, 4, unknown)}
	db := egg(1, res(2*GiB, 0))
	db.Name = "db"
	_, err := s.ChooseVolumeHost("pgdata", db, hosts, t0)
	var ue *UnplaceableError
	if !errors.As(err, &ue) {
		t.Fatalf("ChooseVolumeHost = %v, want an *UnplaceableError", err)
	}
	want := "volume pgdata has no host: egg db needs 2 GiB per replica; no live host has it free: " +
		"host-a: has 1 GiB free, needs 2 GiB per replica; host-b: has not reported since the server started"
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error =\n%s\nwant it to start with\n%s", err, want)
	}

	if _, err := s.ChooseVolumeHost("", db, hosts, t0); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("a volume without a name: %v, want ErrInvalidInput", err)
	}
	bad := db
	bad.Current = map[string]int{"id-host-a": -1}
	if _, err := s.ChooseVolumeHost("pgdata", bad, hosts, t0); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("a negative current slot count: %v, want ErrInvalidInput", err)
	}
}

// TestVolumeHostThenPlace checks the two calls agree: the egg placed after its
// volume was created lands on the chosen host and stays there.
func TestVolumeHostThenPlace(t *testing.T) {
	s := newScheduler(t)
	hosts := []Host{host("a", 8, 4, used(3*GiB, 0)), host("b", 8, 4, used(1*GiB, 0)), host("c", 8, 4, used(2*GiB, 0))}
	db := egg(1, res(1*GiB, 500))
	db.Name = "db"
	c, err := s.ChooseVolumeHost("pgdata", db, hosts, t0)
	if err != nil {
		t.Fatal(err)
	}
	db.Volume, db.VolumeHost = "pgdata", c.HostID
	d, err := s.Place(context.Background(), db, hosts, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Slots) != 1 || d.Slots[c.HostID] != 1 {
		t.Fatalf("db placed on %v, want its volume's host %s", d.Slots, c.HostID)
	}
}
