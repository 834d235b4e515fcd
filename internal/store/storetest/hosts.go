package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

func putStatus(t *testing.T, s store.Statuses, host, report string, at time.Time) []byte {
	t.Helper()
	prev, err := s.PutStatus(ctx(t), host, []byte(report), at)
	if err != nil {
		t.Fatalf("PutStatus %s: %v", host, err)
	}
	return prev
}

func host(t *testing.T, s store.Statuses, id string) store.Host {
	t.Helper()
	h, err := s.Host(ctx(t), id)
	if err != nil {
		t.Fatalf("Host %s: %v", id, err)
	}
	return h
}

// RunLiveness checks the host state transitions and their events.
func RunLiveness(t *testing.T, open Open) {
	t.Run("a first report makes the host, up, with an event", func(t *testing.T) {
		s := open(t)
		start := lastSeq(t, s)
		putStatus(t, s, "h1", `{"n":1}`, t0)
		putStatus(t, s, "h1", `{"n":2}`, t0.Add(2*time.Second))
		h := host(t, s, "h1")
		if h.State != store.HostUp || !h.StateSince.Equal(t0) || !h.LastSeen.Equal(t0.Add(2*time.Second)) {
			t.Fatalf("host = %+v, want up since t0, last seen t0+2s", h)
		}
		evs := eventsSince(t, s, start)
		if !slices.Equal(types(evs), []store.EventType{store.EventHostUp}) || evs[0].Host != "h1" {
			t.Fatalf("events = %+v, want one host.up for h1", evs)
		}
	})

	t.Run("a host not seen since the cutoff goes down once, and up at its next report", func(t *testing.T) {
		s := open(t)
		putStatus(t, s, "h1", `{}`, t0)
		start := lastSeq(t, s)
		down, err := s.MarkHostDown(ctx(t), "h1", t0.Add(time.Second), t0.Add(7*time.Second))
		if err != nil || !down {
			t.Fatalf("MarkHostDown = %v, %v; want true", down, err)
		}
		if h := host(t, s, "h1"); h.State != store.HostDown || !h.StateSince.Equal(t0.Add(7*time.Second)) || !h.LastSeen.Equal(t0) {
			t.Fatalf("host = %+v, want down since t0+7s, last seen t0", h)
		}
		again, err := s.MarkHostDown(ctx(t), "h1", t0.Add(2*time.Second), t0.Add(8*time.Second))
		if err != nil || again {
			t.Fatalf("second MarkHostDown = %v, %v; want false (already down)", again, err)
		}
		putStatus(t, s, "h1", `{}`, t0.Add(9*time.Second))
		if h := host(t, s, "h1"); h.State != store.HostUp {
			t.Fatalf("host after a report = %+v, want up", h)
		}
		want := []store.EventType{store.EventHostDown, store.EventHostUp}
		if got := types(eventsSince(t, s, start)); !slices.Equal(got, want) {
			t.Fatalf("events %v, want %v", got, want)
		}
	})

	// Issue 26: after a server restart every report of a host that was up
	// made a host.up event, with no host.down before it. A restart of the
	// server is not an outage of the host: only a host that was down, or has
	// never reported, comes up with an event.
	t.Run("a host up before a server restart reports again without a host.up; one down comes up with one", func(t *testing.T) {
		s := open(t)
		putStatus(t, s, "up", `{}`, t0)
		putStatus(t, s, "down", `{}`, t0)
		if _, err := s.MarkHostDown(ctx(t), "down", t0.Add(time.Second), t0.Add(7*time.Second)); err != nil {
			t.Fatal(err)
		}
		if err := s.MarkAllHostsUnknown(ctx(t), t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		start := lastSeq(t, s)
		putStatus(t, s, "up", `{}`, t0.Add(time.Minute+time.Second))
		putStatus(t, s, "down", `{}`, t0.Add(time.Minute+time.Second))
		putStatus(t, s, "new", `{}`, t0.Add(time.Minute+time.Second))
		for _, id := range []string{"up", "down", "new"} {
			if h := host(t, s, id); h.State != store.HostUp {
				t.Fatalf("host %s = %+v, want up", id, h)
			}
		}
		evs := eventsSince(t, s, start)
		var got []string
		for _, e := range evs {
			got = append(got, string(e.Type)+" "+e.Host)
		}
		if want := []string{"host.up down", "host.up new"}; !slices.Equal(got, want) {
			t.Fatalf("events %q, want %q", got, want)
		}
	})

	t.Run("a report that lands before the cutoff keeps the host up", func(t *testing.T) {
		s := open(t)
		putStatus(t, s, "h1", `{}`, t0.Add(5*time.Second))
		down, err := s.MarkHostDown(ctx(t), "h1", t0.Add(5*time.Second), t0.Add(6*time.Second))
		if err != nil || down {
			t.Fatalf("MarkHostDown of a host seen at the cutoff = %v, %v; want false", down, err)
		}
		if h := host(t, s, "h1"); h.State != store.HostUp {
			t.Fatalf("host = %+v, want up", h)
		}
	})

	t.Run("marking an unknown id down changes nothing", func(t *testing.T) {
		s := open(t)
		down, err := s.MarkHostDown(ctx(t), "nope", t0, t0)
		if err != nil || down {
			t.Fatalf("MarkHostDown of no host = %v, %v", down, err)
		}
	})

	t.Run("a server start makes every host not down unknown, with an event each", func(t *testing.T) {
		s := open(t)
		putStatus(t, s, "h1", `{}`, t0)
		putStatus(t, s, "h2", `{}`, t0)
		if _, err := s.MarkHostDown(ctx(t), "h2", t0.Add(time.Second), t0.Add(7*time.Second)); err != nil {
			t.Fatal(err)
		}
		start := lastSeq(t, s)
		if err := s.MarkAllHostsUnknown(ctx(t), t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if err := s.MarkAllHostsUnknown(ctx(t), t0.Add(2*time.Minute)); err != nil { // already unknown: no events
			t.Fatal(err)
		}
		if h := host(t, s, "h1"); h.State != store.HostUnknown || !h.StateSince.Equal(t0.Add(time.Minute)) || !h.LastSeen.Equal(t0) {
			t.Fatalf("host = %+v, want unknown since t0+1m, last seen kept", h)
		}
		// A host down stays down: the server's restart tells nothing new of it.
		if h := host(t, s, "h2"); h.State != store.HostDown || !h.StateSince.Equal(t0.Add(7*time.Second)) {
			t.Fatalf("host = %+v, want still down since t0+7s", h)
		}
		evs := eventsSince(t, s, start)
		if !slices.Equal(types(evs), []store.EventType{store.EventHostUnknown}) || evs[0].Host != "h1" {
			t.Fatalf("events %+v, want one host.unknown, of h1", evs)
		}
		// From unknown a host goes down like from up.
		if down, err := s.MarkHostDown(ctx(t), "h1", t0.Add(2*time.Minute), t0.Add(2*time.Minute)); err != nil || !down {
			t.Fatalf("MarkHostDown from unknown = %v, %v", down, err)
		}
	})
}

// RunStatuses checks status reports and the host views.
func RunStatuses(t *testing.T, open Open) {
	t.Run("a missing host or report is ErrNotFound", func(t *testing.T) {
		s := open(t)
		if _, err := s.Host(ctx(t), "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Host of no host: %v, want ErrNotFound", err)
		}
		if _, err := s.Status(ctx(t), "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Status of no host: %v, want ErrNotFound", err)
		}
	})

	t.Run("the latest report is kept and the one it replaced returned", func(t *testing.T) {
		s := open(t)
		if prev := putStatus(t, s, "h1", `{"n":1}`, t0); prev != nil {
			t.Fatalf("first PutStatus returned %q, want nil", prev)
		}
		if prev := putStatus(t, s, "h1", `{"n":2}`, t0.Add(time.Second)); string(prev) != `{"n":1}` {
			t.Fatalf("second PutStatus returned %q, want the first report", prev)
		}
		st, err := s.Status(ctx(t), "h1")
		if err != nil {
			t.Fatal(err)
		}
		if st.HostID != "h1" || string(st.Report) != `{"n":2}` || !st.ReceivedAt.Equal(t0.Add(time.Second)) {
			t.Fatalf("Status = %+v", st)
		}
	})

	t.Run("every host's latest report is listed in one read, hosts without one left out", func(t *testing.T) {
		s := open(t)
		if err := s.CreateJoinToken(ctx(t), store.JoinToken{ID: "jt", Hash: "hash-jt", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), MaxUses: 1}); err != nil {
			t.Fatal(err)
		}
		if err := s.JoinHost(ctx(t), "hash-jt", store.HostIdentity{ID: "h0", Name: "silent", TokenHash: "th", JoinedAt: t0}); err != nil {
			t.Fatal(err)
		}
		putStatus(t, s, "h2", `{"n":2}`, t0)
		putStatus(t, s, "h1", `{"n":1}`, t0)
		putStatus(t, s, "h1", `{"n":3}`, t0.Add(time.Second))
		all, err := s.AllStatuses(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, st := range all {
			got = append(got, fmt.Sprintf("%s %s %d", st.HostID, st.Report, st.ReceivedAt.Sub(t0).Milliseconds()))
		}
		if want := []string{`h1 {"n":3} 1000`, `h2 {"n":2} 0`}; !slices.Equal(got, want) {
			t.Fatalf("AllStatuses\n got %q\nwant %q", got, want)
		}
	})

	t.Run("hosts are listed by id", func(t *testing.T) {
		s := open(t)
		for _, id := range []string{"h3", "h1", "h2"} {
			putStatus(t, s, id, `{}`, t0)
		}
		hosts, err := s.ListHosts(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, h := range hosts {
			ids = append(ids, h.ID)
		}
		if !slices.Equal(ids, []string{"h1", "h2", "h3"}) {
			t.Fatalf("ListHosts ids = %v", ids)
		}
	})
}

// RunDesiredStates checks desired states and their wake-ups.
func RunDesiredStates(t *testing.T, open Open) {
	t.Run("a host with no desired state gets an empty one", func(t *testing.T) {
		s := open(t)
		d, err := s.DesiredState(ctx(t), "h1")
		if err != nil || d.HostID != "h1" || d.Version != "" || d.Doc != nil {
			t.Fatalf("DesiredState = %+v, %v; want an empty state for h1", d, err)
		}
	})

	t.Run("a new version is stored and wakes the host's waiters only", func(t *testing.T) {
		s := open(t)
		mine, theirs := s.WatchDesiredState("h1"), s.WatchDesiredState("h2")
		changed, err := putDesired(t, s, store.DesiredState{HostID: "h1", Version: "v1", Doc: []byte(`{"a":1}`), UpdatedAt: t0})
		if err != nil || !changed {
			t.Fatalf("PutDesiredStates = %v, %v", changed, err)
		}
		if !closedWithin(mine, 5*time.Second) {
			t.Fatal("the host's waiter was not woken")
		}
		if closedWithin(theirs, 50*time.Millisecond) {
			t.Fatal("another host's waiter was woken")
		}
		d, err := s.DesiredState(ctx(t), "h1")
		if err != nil || d.Version != "v1" || string(d.Doc) != `{"a":1}` || !d.UpdatedAt.Equal(t0) {
			t.Fatalf("DesiredState = %+v, %v", d, err)
		}
	})

	t.Run("the same version changes nothing and wakes nobody", func(t *testing.T) {
		s := open(t)
		first := store.DesiredState{HostID: "h1", Version: "v1", Doc: []byte(`{"a":1}`), UpdatedAt: t0}
		if _, err := putDesired(t, s, first); err != nil {
			t.Fatal(err)
		}
		w := s.WatchDesiredState("h1")
		changed, err := putDesired(t, s, store.DesiredState{HostID: "h1", Version: "v1", Doc: []byte(`{"a":1}`), UpdatedAt: t0.Add(time.Hour)})
		if err != nil || changed {
			t.Fatalf("PutDesiredStates of the same version = %v, %v; want unchanged", changed, err)
		}
		if closedWithin(w, 50*time.Millisecond) {
			t.Fatal("an unchanged state woke a waiter")
		}
		if d, _ := s.DesiredState(ctx(t), "h1"); !d.UpdatedAt.Equal(t0) {
			t.Fatalf("UpdatedAt moved to %v on an unchanged put", d.UpdatedAt)
		}
	})

	t.Run("a host's state is unchanged by its liveness", func(t *testing.T) {
		s := open(t)
		if _, err := putDesired(t, s, store.DesiredState{HostID: "h1", Version: "v1", Doc: []byte(`{"w":[1]}`), UpdatedAt: t0}); err != nil {
			t.Fatal(err)
		}
		putStatus(t, s, "h1", `{}`, t0)
		if _, err := s.MarkHostDown(ctx(t), "h1", t0.Add(time.Second), t0.Add(10*time.Second)); err != nil {
			t.Fatal(err)
		}
		if err := s.MarkAllHostsUnknown(ctx(t), t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if d, _ := s.DesiredState(ctx(t), "h1"); d.Version != "v1" || string(d.Doc) != `{"w":[1]}` {
			t.Fatalf("desired state after down and unknown = %+v", d)
		}
	})
}

// putDesired stores one host's desired state.
func putDesired(t *testing.T, s Store, d store.DesiredState) (bool, error) {
	return s.PutDesiredStates(ctx(t), []store.DesiredState{d}, nil)
}

// RunDesiredWrites checks that the states of many hosts and the peer list
// are written together, each waiter woken only by what changed for it.
func RunDesiredWrites(t *testing.T, open Open) {
	state := func(host, version string) store.DesiredState {
		return store.DesiredState{HostID: host, Version: version, Doc: []byte(`{"host_id":"` + host + `","v":"` + version + `"}`), UpdatedAt: t0}
	}
	t.Run("an apply's states are written at once, waking the hosts whose state changed", func(t *testing.T) {
		s := open(t)
		if changed, err := s.PutDesiredStates(ctx(t), []store.DesiredState{state("h2", "v1"), state("h1", "v1")}, nil); err != nil || !changed {
			t.Fatalf("PutDesiredStates = %v, %v", changed, err)
		}
		w1, w2, w3 := s.WatchDesiredState("h1"), s.WatchDesiredState("h2"), s.WatchDesiredState("h3")
		if changed, err := s.PutDesiredStates(ctx(t), []store.DesiredState{state("h3", "v1"), state("h1", "v2"), state("h2", "v1")}, nil); err != nil || !changed {
			t.Fatalf("PutDesiredStates = %v, %v", changed, err)
		}
		if !closedWithin(w1, 5*time.Second) || !closedWithin(w3, 5*time.Second) {
			t.Fatal("a host whose state changed was not woken")
		}
		if closedWithin(w2, 50*time.Millisecond) {
			t.Fatal("a host whose state did not change was woken")
		}
		all, err := s.AllDesiredStates(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range all {
			got = append(got, d.HostID+"@"+d.Version+" "+string(d.Doc))
		}
		want := []string{`h1@v2 {"host_id":"h1","v":"v2"}`, `h2@v1 {"host_id":"h2","v":"v1"}`, `h3@v1 {"host_id":"h3","v":"v1"}`}
		if !slices.Equal(got, want) {
			t.Fatalf("AllDesiredStates\n got %q\nwant %q", got, want)
		}
	})

	t.Run("a failed write keeps none of the apply's states", func(t *testing.T) {
		s := open(t)
		if _, err := putDesired(t, s, state("h1", "v1")); err != nil {
			t.Fatal(err)
		}
		c, cancel := context.WithCancel(ctx(t))
		cancel()
		if _, err := s.PutDesiredStates(c, []store.DesiredState{state("h1", "v2"), state("h2", "v1")}, nil); err == nil {
			t.Fatal("a write with its context cancelled succeeded")
		}
		all, err := s.AllDesiredStates(ctx(t))
		if err != nil || len(all) != 1 || all[0].Version != "v1" {
			t.Fatalf("after a failed write: %+v, %v; want h1 at v1 alone", all, err)
		}
	})

	t.Run("the peer list is stored once and a new one wakes every host", func(t *testing.T) {
		s := open(t)
		if l, err := s.DesiredPeers(ctx(t)); err != nil || l.Version != "" || l.Doc != nil {
			t.Fatalf("DesiredPeers with none stored = %+v, %v", l, err)
		}
		peers := store.PeerList{Version: "p1", Doc: []byte(`[{"host_id":"h1"}]`), UpdatedAt: t0}
		w1, w2 := s.WatchDesiredState("h1"), s.WatchDesiredState("h2")
		if changed, err := s.PutDesiredStates(ctx(t), nil, &peers); err != nil || !changed {
			t.Fatalf("PutDesiredStates of the peers = %v, %v", changed, err)
		}
		if !closedWithin(w1, 5*time.Second) || !closedWithin(w2, 5*time.Second) {
			t.Fatal("a new peer list did not wake every host")
		}
		if l, err := s.DesiredPeers(ctx(t)); err != nil || l.Version != "p1" || string(l.Doc) != string(peers.Doc) || !l.UpdatedAt.Equal(t0) {
			t.Fatalf("DesiredPeers = %+v, %v", l, err)
		}
		w1 = s.WatchDesiredState("h1")
		same := peers
		same.UpdatedAt = t0.Add(time.Hour)
		if changed, err := s.PutDesiredStates(ctx(t), nil, &same); err != nil || changed {
			t.Fatalf("PutDesiredStates of the same peers = %v, %v; want unchanged", changed, err)
		}
		if closedWithin(w1, 50*time.Millisecond) {
			t.Fatal("an unchanged peer list woke a host")
		}
		if l, _ := s.DesiredPeers(ctx(t)); !l.UpdatedAt.Equal(t0) {
			t.Fatalf("UpdatedAt moved to %v on an unchanged put", l.UpdatedAt)
		}
	})
}

// RunEvents checks the event log.
func RunEvents(t *testing.T, open Open) {
	t.Run("events keep their fields and come back in order, after since, up to limit", func(t *testing.T) {
		s := open(t)
		base := lastSeq(t, s)
		var seqs []int64
		for i := range 5 {
			seq, err := s.AppendEvent(ctx(t), store.Event{Time: t0.Add(time.Duration(i) * time.Millisecond),
				Type: store.EventRolloutProgressing, Project: "default/shop", Host: "h1", Resource: "egg/web", Message: "1/3", Actor: "alice"})
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, seq)
		}
		if !slices.IsSorted(seqs) || seqs[0] <= base || len(slices.Compact(slices.Clone(seqs))) != 5 {
			t.Fatalf("seqs %v are not increasing after %d", seqs, base)
		}
		evs, err := s.ListEvents(ctx(t), seqs[1], 2)
		if err != nil {
			t.Fatal(err)
		}
		want := []store.Event{
			{Seq: seqs[2], Time: t0.Add(2 * time.Millisecond), Type: store.EventRolloutProgressing, Project: "default/shop", Host: "h1", Resource: "egg/web", Message: "1/3", Actor: "alice"},
			{Seq: seqs[3], Time: t0.Add(3 * time.Millisecond), Type: store.EventRolloutProgressing, Project: "default/shop", Host: "h1", Resource: "egg/web", Message: "1/3", Actor: "alice"},
		}
		if len(evs) != 2 || evs[0] != want[0] || evs[1] != want[1] {
			t.Fatalf("ListEvents(since %d, 2) = %+v\nwant %+v", seqs[1], evs, want)
		}
		if evs, _ := s.ListEvents(ctx(t), seqs[4], 10); len(evs) != 0 {
			t.Fatalf("events after the last: %+v", evs)
		}
	})

	t.Run("a project's events are its own only, after since, up to limit", func(t *testing.T) {
		s := open(t)
		var shop []int64
		for i, project := range []string{"default/shop", "default/shop-2", "", "other/shop", "default/shop", "default/shop"} {
			seq, err := s.AppendEvent(ctx(t), store.Event{Time: t0.Add(time.Duration(i) * time.Millisecond),
				Type: store.EventRolloutDone, Project: project, Message: fmt.Sprint(i)})
			if err != nil {
				t.Fatal(err)
			}
			if project == "default/shop" {
				shop = append(shop, seq)
			}
		}
		evs, err := s.ListProjectEvents(ctx(t), "default/shop", 0, 2)
		if err != nil || len(evs) != 2 || evs[0].Seq != shop[0] || evs[1].Seq != shop[1] || evs[0].Message != "0" {
			t.Fatalf("ListProjectEvents(default/shop, 0, 2) = %+v, %v; want the events %v", evs, err, shop[:2])
		}
		evs, err = s.ListProjectEvents(ctx(t), "default/shop", shop[1], 10)
		if err != nil || len(evs) != 1 || evs[0].Seq != shop[2] {
			t.Fatalf("ListProjectEvents(default/shop, since %d) = %+v, %v; want the event %d", shop[1], evs, err, shop[2])
		}
		if evs, err := s.ListProjectEvents(ctx(t), "default/none", 0, 10); err != nil || len(evs) != 0 {
			t.Fatalf("ListProjectEvents of a project without events = %+v, %v", evs, err)
		}
	})

	t.Run("watchers wake at any recorded event, whoever records it", func(t *testing.T) {
		s := open(t)
		w := s.WatchEvents()
		if _, err := s.AppendEvent(ctx(t), store.Event{Time: t0, Type: store.EventRolloutDone}); err != nil {
			t.Fatal(err)
		}
		if !closedWithin(w, 5*time.Second) {
			t.Fatal("AppendEvent woke no watcher")
		}
		w = s.WatchEvents()
		putStatus(t, s, "h1", `{}`, t0) // records host.up
		if !closedWithin(w, 5*time.Second) {
			t.Fatal("a host.up event woke no watcher")
		}
		w = s.WatchEvents()
		putStatus(t, s, "h1", `{}`, t0) // no event
		if closedWithin(w, 50*time.Millisecond) {
			t.Fatal("a write without an event woke a watcher")
		}
	})
}
