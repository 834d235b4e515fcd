package placement

import (
	"context"
	"fmt"
	"testing"
)

// benchFleet returns 50 live hosts and 1,000 eggs of mixed sizes: every tenth
// egg has placement.hosts, every twentieth is stateful, with one replica.
func benchFleet() ([]Host, []Egg) {
	hosts := make([]Host, 50)
	for i := range hosts {
		hosts[i] = host(fmt.Sprintf("host-%02d", i), 64, 32)
	}
	eggs := make([]Egg, 1000)
	for i := range eggs {
		e := Egg{Namespace: "default", Project: fmt.Sprintf("p%d", i/20), Name: fmt.Sprintf("e%d", i),
			Replicas:   1 + i%5,
			PerReplica: res(int64(128+(i%8)*64)*MiB, int64(100+(i%5)*100)),
		}
		if i%10 == 3 {
			for j := range 5 {
				e.Placement = append(e.Placement, hosts[(i+j*7)%len(hosts)].Name)
			}
		}
		if i%20 == 7 {
			e.Replicas, e.Volume = 1, fmt.Sprintf("data%d", i)
		}
		eggs[i] = e
	}
	return hosts, eggs
}

// placeAll places every egg in turn, recording each decision on the hosts as
// the egg provider would, and returns the number of slots placed.
func placeAll(b *testing.B, s *Scheduler, hosts []Host, eggs []Egg) int {
	index := make(map[string]int, len(hosts))
	for i, h := range hosts {
		index[h.ID] = i
	}
	slots := 0
	for i := range eggs {
		e := &eggs[i]
		if e.Volume != "" && e.VolumeHost == "" {
			c, err := s.ChooseVolumeHost(e.Volume, *e, hosts, t0)
			if err != nil {
				b.Fatal(err)
			}
			e.VolumeHost = c.HostID
		}
		d, err := s.Place(context.Background(), *e, hosts, t0)
		if err != nil {
			b.Fatal(err)
		}
		if d.Total() != e.Replicas {
			b.Fatalf("egg %s: %d of %d replicas placed", e.Name, d.Total(), e.Replicas)
		}
		e.Current = d.Slots
		for id, n := range d.Slots {
			h := &hosts[index[id]]
			h.Placed = append(h.Placed, Allocation{Workload: e.ID(), Slots: n, PerSlot: e.PerReplica})
		}
		slots += d.Total()
	}
	return slots
}

// BenchmarkPlace places 1,000 eggs over 50 hosts, from scratch ("initial",
// which also chooses the stateful eggs' volume hosts) and again once they are
// placed ("reapply", the common case of an unchanged project re-applied:
// every host then carries about 60 workloads to account for).
func BenchmarkPlace(b *testing.B) {
	s := newScheduler(b)
	b.Run("initial", func(b *testing.B) {
		baseHosts, baseEggs := benchFleet()
		runs := 0
		for b.Loop() {
			hosts := append([]Host(nil), baseHosts...)
			eggs := append([]Egg(nil), baseEggs...)
			placeAll(b, s, hosts, eggs)
			runs++
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(runs*len(baseEggs)), "ns/egg")
	})
	b.Run("reapply", func(b *testing.B) {
		hosts, eggs := benchFleet()
		placeAll(b, s, hosts, eggs)
		runs := 0
		for b.Loop() {
			for i := range eggs {
				d, err := s.Place(context.Background(), eggs[i], hosts, t0)
				if err != nil || len(d.Slots) != len(eggs[i].Current) {
					b.Fatalf("re-placing %s: %v, %v", eggs[i].Name, d.Slots, err)
				}
			}
			runs++
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(runs*len(eggs)), "ns/egg")
	})
}
