package server

import (
	"slices"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
)

// startedWithH1 is a started server whose one host, h1, reported and has a
// desired state.
func startedWithH1(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t, DefaultConfig(), &clock{now: time.Now()})
	if _, err := h.store.PutStatus(t.Context(), "h1", []byte(report("h1")), h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	h.publish("h1", 1, "x")
	if err := h.srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return h
}

// The valid host set in every state follows the fleet: a host that joins is
// listed (its peers' meshes accept it), its mesh addresses once it reports
// them, and a removed host is gone at once (its peers close its connections).
func TestEveryStatesValidHostSetFollowsJoinsReportsAndRemovals(t *testing.T) {
	h := startedWithH1(t)
	ctx := t.Context()
	peersOfH1 := func() []contract.Peer {
		t.Helper()
		return decode[contract.DesiredState](t, h.do("GET", "/api/v1/hosts/h1/desired-state", nil), 200).Peers
	}
	find := func(peers []contract.Peer, id string) (contract.Peer, bool) {
		i := slices.IndexFunc(peers, func(p contract.Peer) bool { return p.HostID == id })
		if i < 0 {
			return contract.Peer{}, false
		}
		return peers[i], true
	}
	if _, ok := find(peersOfH1(), "h1"); !ok {
		t.Fatalf("after the start h1's state lists %+v, want h1 itself", peersOfH1())
	}

	jt, err := h.fleet.CreateJoinToken(ctx, api.CreateJoinTokenRequest{})
	if err != nil {
		t.Fatal(err)
	}
	joined, err := h.fleet.Join(ctx, jt.Token, api.JoinRequest{Name: "beta"})
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := find(peersOfH1(), joined.HostID); !ok || p.Name != "beta" {
		t.Fatalf("after beta joined h1's state lists %+v, want beta", peersOfH1())
	}

	beta := contract.StatusReport{HostID: joined.HostID, Time: time.Now(), MeshAddresses: []string{"10.210.9.2:7702"}}
	if err := h.fleet.Report(ctx, joined.HostID, beta); err != nil {
		t.Fatal(err)
	}
	// The peer list is written again in the background, within about
	// peerSyncGap of the report.
	eventually(t, "h1's state lists beta's mesh address", func() bool {
		p, _ := find(peersOfH1(), joined.HostID)
		return slices.Equal(p.Addresses, []string{"10.210.9.2:7702"})
	})

	if _, err := h.fleet.RemoveHost(ctx, "beta"); err != nil {
		t.Fatal(err)
	}
	if _, ok := find(peersOfH1(), joined.HostID); ok {
		t.Fatalf("after beta was removed h1's state still lists it: %+v", peersOfH1())
	}
}

// The fleet's peers are stored once and served in every state: a poll that
// names the peers it holds gets the state without them while they are
// unchanged, at the same version, and with them once they change.
func TestALongPollNamingItsPeersGetsThemOnlyWhenTheyChange(t *testing.T) {
	h := startedWithH1(t)
	ctx := t.Context()
	whole := decode[contract.DesiredState](t, h.do("GET", "/api/v1/hosts/h1/desired-state", nil), 200)
	if len(whole.Peers) != 1 || whole.PeersOmitted || whole.PeersVersion != contract.PeersVersion(whole.Peers) ||
		whole.Version != whole.ComputeVersion() {
		t.Fatalf("the whole state: %+v", whole)
	}
	// The hosts' views give the version the host gets, which its agent
	// reports back: peers included.
	list := decode[api.HostList](t, h.do("GET", "/api/v1/hosts", nil), 200)
	one := decode[api.HostDetail](t, h.do("GET", "/api/v1/hosts/h1", nil), 200)
	if len(list.Hosts) != 1 || list.Hosts[0].DesiredVersion != whole.Version || one.DesiredVersion != whole.Version {
		t.Fatalf("hosts list %+v and h1 %+v, want desired version %s", list.Hosts, one.Host, whole.Version)
	}
	lean := decode[contract.DesiredState](t, h.do("GET", "/api/v1/hosts/h1/desired-state?version=old&peers="+whole.PeersVersion, nil), 200)
	if lean.Peers != nil || !lean.PeersOmitted || lean.PeersVersion != whole.PeersVersion || lean.Version != whole.Version ||
		len(lean.Workloads) != 1 {
		t.Fatalf("naming the peers it holds, the host got %+v", lean)
	}
	stale := decode[contract.DesiredState](t, h.do("GET", "/api/v1/hosts/h1/desired-state?version=old&peers=stale", nil), 200)
	if stale.PeersOmitted || len(stale.Peers) != 1 {
		t.Fatalf("naming peers it does not hold, the host got %+v", stale)
	}

	// A held poll is answered by a change of the peers alone, with them.
	answer := make(chan contract.DesiredState, 1)
	go func() {
		answer <- decode[contract.DesiredState](t, h.do("GET",
			"/api/v1/hosts/h1/desired-state?wait=10s&version="+whole.Version+"&peers="+whole.PeersVersion, nil), 200)
	}()
	// Joined before the poll waits, beta would be in its first read: it
	// would pass without a held poll being woken.
	eventually(t, "the poll held", func() bool { return gaugeValue(t, h.srv.metrics.waiters) == 1 })
	jt, err := h.fleet.CreateJoinToken(ctx, api.CreateJoinTokenRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.fleet.Join(ctx, jt.Token, api.JoinRequest{Name: "beta"}); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-answer:
		if got.PeersOmitted || len(got.Peers) != 2 || got.Version == whole.Version || got.Version != got.ComputeVersion() {
			t.Fatalf("after beta joined the held poll got %+v", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a new peer list did not answer the held poll")
	}
}

// Only a change of the peers alone is spread out; a change of the host's
// own state, or an agent that holds no peers, is answered at once.
func TestOnlyAPeerListChangeIsSpreadOut(t *testing.T) {
	held := contract.CombineVersions("c1", "p1")
	for _, tc := range []struct {
		name                        string
		known, held, content, peers string
		want                        bool
	}{
		{"the peers alone changed", held, "p1", "c1", "p2", true},
		{"the host's state changed too", held, "p1", "c2", "p2", false},
		{"the host's state alone changed", held, "p1", "c2", "p1", false},
		{"an agent naming no peers", held, "", "c1", "p2", false},
		{"nothing changed", held, "p1", "c1", "p1", false},
	} {
		if got := peersAloneChanged(tc.known, tc.held, tc.content, tc.peers); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if d := peerSpread(0); d != 0 {
		t.Errorf("with no poll held the spread is %v", d)
	}
	for range 100 {
		if d := peerSpread(2 * peerAnswerRate); d < 0 || d >= 2*time.Second { // two seconds' worth
			t.Fatalf("a wait of %v for %d polls held, want under 2s", d, 2*peerAnswerRate)
		}
	}
}
