package storetest

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// RunHostCapacities checks the hosts' capacity baselines and pins.
func RunHostCapacities(t *testing.T, open Open) {
	small := store.Capacity{Memory: 8 << 30, MilliCPU: 4000}
	big := store.Capacity{Memory: 64 << 30, MilliCPU: 32000}

	t.Run("the first baseline is kept and later ones change nothing", func(t *testing.T) {
		s := open(t)
		if ok, err := s.RecordCapacityBaseline(ctx(t), "h1", small, t0); err != nil || !ok {
			t.Fatalf("first RecordCapacityBaseline = %v, %v; want recorded", ok, err)
		}
		if ok, err := s.RecordCapacityBaseline(ctx(t), "h1", big, t0.Add(time.Second)); err != nil || ok {
			t.Fatalf("second RecordCapacityBaseline = %v, %v; want not recorded", ok, err)
		}
		got, err := s.AllHostCapacities(ctx(t))
		want := []store.HostCapacity{{HostID: "h1", Baseline: small, BaselineAt: t0}}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("AllHostCapacities = %+v, %v; want %+v", got, err, want)
		}
	})

	t.Run("a pin keeps the baseline, names its admin and is logged", func(t *testing.T) {
		s := open(t)
		if _, err := s.RecordCapacityBaseline(ctx(t), "h1", small, t0); err != nil {
			t.Fatal(err)
		}
		start := lastSeq(t, s)
		if err := s.PinCapacity(store.WithActor(ctx(t), "alice"), "h1", big, t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		got, err := s.AllHostCapacities(ctx(t))
		want := []store.HostCapacity{{HostID: "h1", Baseline: small, BaselineAt: t0, Pinned: big, PinnedAt: t0.Add(time.Minute), PinnedBy: "alice"}}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("AllHostCapacities = %+v, %v; want %+v", got, err, want)
		}
		evs := eventsSince(t, s, start)
		if !slices.Equal(types(evs), []store.EventType{store.EventHostCapacityPinned}) || evs[0].Host != "h1" || evs[0].Actor != "alice" {
			t.Fatalf("events = %+v, want one host.capacity_pinned for h1 by alice", evs)
		}
	})

	t.Run("a host pinned before its first report gets its baseline at that report", func(t *testing.T) {
		s := open(t)
		if err := s.PinCapacity(ctx(t), "h2", big, t0); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.RecordCapacityBaseline(ctx(t), "h2", small, t0.Add(time.Second)); err != nil || !ok {
			t.Fatalf("RecordCapacityBaseline after a pin = %v, %v; want recorded", ok, err)
		}
		if _, err := s.RecordCapacityBaseline(ctx(t), "h1", small, t0); err != nil {
			t.Fatal(err)
		}
		got, err := s.AllHostCapacities(ctx(t))
		want := []store.HostCapacity{
			{HostID: "h1", Baseline: small, BaselineAt: t0},
			{HostID: "h2", Baseline: small, BaselineAt: t0.Add(time.Second), Pinned: big, PinnedAt: t0},
		}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("AllHostCapacities = %+v, %v; want %+v", got, err, want)
		}
	})

	t.Run("a capacity that is not positive is refused", func(t *testing.T) {
		s := open(t)
		if _, err := s.RecordCapacityBaseline(ctx(t), "h1", store.Capacity{Memory: 1}, t0); err == nil {
			t.Fatal("a baseline without CPU was recorded")
		}
		if err := s.PinCapacity(ctx(t), "h1", store.Capacity{Memory: -1, MilliCPU: 1}, t0); err == nil {
			t.Fatal("a negative pin was recorded")
		}
		if got, err := s.AllHostCapacities(ctx(t)); err != nil || len(got) != 0 {
			t.Fatalf("AllHostCapacities = %+v, %v; want none", got, err)
		}
	})
}
