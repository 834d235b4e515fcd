package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// joinToken is a join token created at t0, valid for an hour, for uses hosts.
func joinToken(id string, uses int) store.JoinToken {
	return store.JoinToken{ID: id, Hash: "hash-of-" + id, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), MaxUses: uses}
}

func hostIdentity(id, name string, at time.Time) store.HostIdentity {
	return store.HostIdentity{ID: id, Name: name, TokenHash: "token-of-" + id, JoinedAt: at}
}

func createJoinToken(t *testing.T, s Store, tok store.JoinToken) {
	t.Helper()
	if err := s.CreateJoinToken(ctx(t), tok); err != nil {
		t.Fatalf("CreateJoinToken %s: %v", tok.ID, err)
	}
}

func joinHost(t *testing.T, s Store, joinHash string, h store.HostIdentity) {
	t.Helper()
	if err := s.JoinHost(ctx(t), joinHash, h); err != nil {
		t.Fatalf("JoinHost %s: %v", h.Name, err)
	}
}

func joinTokenByID(t *testing.T, s Store, id string) store.JoinToken {
	t.Helper()
	all, err := s.ListJoinTokens(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range all {
		if tok.ID == id {
			return tok
		}
	}
	t.Fatalf("join token %s not listed in %+v", id, all)
	return store.JoinToken{}
}

// RunJoinTokens checks join tokens and joining hosts with them.
func RunJoinTokens(t *testing.T, open Open) {
	t.Run("a join token is stored as given, found by its hash, listed oldest first", func(t *testing.T) {
		s := open(t)
		later := joinToken("j2", 3)
		later.CreatedAt = t0.Add(time.Minute)
		createJoinToken(t, s, later)
		createJoinToken(t, s, joinToken("j1", 1))
		got, err := s.JoinTokenByHash(ctx(t), "hash-of-j2")
		if err != nil || got != later {
			t.Fatalf("JoinTokenByHash = %+v, %v; want %+v", got, err, later)
		}
		all, err := s.ListJoinTokens(ctx(t))
		if err != nil || len(all) != 2 || all[0].ID != "j1" || all[1].ID != "j2" {
			t.Fatalf("ListJoinTokens = %+v, %v; want j1 then j2", all, err)
		}
		if _, err := s.JoinTokenByHash(ctx(t), "hash-of-nothing"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("JoinTokenByHash of an unknown hash: %v, want ErrNotFound", err)
		}
	})

	t.Run("a join token's ID and hash are unique", func(t *testing.T) {
		s := open(t)
		createJoinToken(t, s, joinToken("j1", 1))
		sameHash := joinToken("j2", 1)
		sameHash.Hash = "hash-of-j1"
		for _, tok := range []store.JoinToken{joinToken("j1", 5), sameHash} {
			if err := s.CreateJoinToken(ctx(t), tok); !errors.Is(err, store.ErrExists) {
				t.Fatalf("CreateJoinToken %+v: %v, want ErrExists", tok, err)
			}
		}
		if got := joinTokenByID(t, s, "j1"); got.MaxUses != 1 {
			t.Fatalf("the first token was replaced: %+v", got)
		}
	})

	t.Run("joining spends a use and lists the host, unknown, with a host.joined event", func(t *testing.T) {
		s := open(t)
		createJoinToken(t, s, joinToken("j1", 2))
		start := lastSeq(t, s)
		joinHost(t, s, "hash-of-j1", hostIdentity("h1", "alpha", t0.Add(time.Second)))
		if tok := joinTokenByID(t, s, "j1"); tok.Uses != 1 {
			t.Fatalf("uses = %d after one join, want 1", tok.Uses)
		}
		got, err := s.HostByTokenHash(ctx(t), "token-of-h1")
		want := hostIdentity("h1", "alpha", t0.Add(time.Second))
		want.JoinToken = "j1"
		if err != nil || got != want {
			t.Fatalf("HostByTokenHash = %+v, %v; want %+v", got, err, want)
		}
		h := host(t, s, "h1")
		if h.State != store.HostUnknown || !h.LastSeen.IsZero() || !h.StateSince.Equal(t0.Add(time.Second)) {
			t.Fatalf("listed host = %+v, want unknown since the join, never seen", h)
		}
		evs := eventsSince(t, s, start)
		if !slices.Equal(types(evs), []store.EventType{store.EventHostJoined}) || evs[0].Host != "h1" {
			t.Fatalf("events = %+v, want one host.joined for h1", evs)
		}
		// Its first report makes it up, as for any host.
		putStatus(t, s, "h1", `{}`, t0.Add(2*time.Second))
		if h := host(t, s, "h1"); h.State != store.HostUp {
			t.Fatalf("after a report the host is %s, want up", h.State)
		}
	})

	t.Run("a token expired, used up or revoked lets nobody join, and nothing changes", func(t *testing.T) {
		s := open(t)
		createJoinToken(t, s, joinToken("once", 1))
		createJoinToken(t, s, joinToken("expiring", 5))
		createJoinToken(t, s, joinToken("revoked", 5))
		joinHost(t, s, "hash-of-once", hostIdentity("h1", "alpha", t0))
		if _, err := s.RevokeJoinToken(ctx(t), "revoked", t0); err != nil {
			t.Fatal(err)
		}
		start := lastSeq(t, s)
		for _, tc := range []struct {
			hash string
			at   time.Time
		}{
			{"hash-of-once", t0.Add(time.Second)},
			{"hash-of-expiring", t0.Add(time.Hour)},
			{"hash-of-revoked", t0.Add(time.Second)},
			{"hash-of-nothing", t0},
		} {
			err := s.JoinHost(ctx(t), tc.hash, hostIdentity("h2", "beta", tc.at))
			if !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("JoinHost with %s at %v: %v, want ErrNotFound", tc.hash, tc.at, err)
			}
		}
		if _, err := s.HostByTokenHash(ctx(t), "token-of-h2"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a refused join left host h2 behind: %v", err)
		}
		if evs := eventsSince(t, s, start); len(evs) != 0 {
			t.Fatalf("refused joins recorded events %+v", evs)
		}
		if tok := joinTokenByID(t, s, "expiring"); tok.Uses != 0 {
			t.Fatalf("an expired token's uses went to %d", tok.Uses)
		}
	})

	t.Run("a name taken by a member, or equal to a host's ID, is refused and spends no use", func(t *testing.T) {
		s := open(t)
		createJoinToken(t, s, joinToken("j1", 10))
		joinHost(t, s, "hash-of-j1", hostIdentity("h1", "alpha", t0))
		for _, h := range []store.HostIdentity{
			hostIdentity("h2", "alpha", t0),  // the name of a member
			hostIdentity("h2", "h1", t0),     // another host's ID as a name
			hostIdentity("alpha", "gam", t0), // another host's name as an ID
			hostIdentity("h1", "delta", t0),  // an ID taken
		} {
			if err := s.JoinHost(ctx(t), "hash-of-j1", h); !errors.Is(err, store.ErrExists) {
				t.Fatalf("JoinHost %+v: %v, want ErrExists", h, err)
			}
		}
		if tok := joinTokenByID(t, s, "j1"); tok.Uses != 1 {
			t.Fatalf("refused joins spent uses: %d, want 1", tok.Uses)
		}
	})

	t.Run("concurrent joins never spend more uses than the token has", func(t *testing.T) {
		s := open(t)
		createJoinToken(t, s, joinToken("j1", 3))
		const joiners = 8
		var wg sync.WaitGroup
		errs := make([]error, joiners)
		for i := range joiners {
			wg.Go(func() {
				errs[i] = s.JoinHost(ctx(t), "hash-of-j1", hostIdentity(fmt.Sprintf("h%d", i), fmt.Sprintf("n%d", i), t0))
			})
		}
		wg.Wait()
		joined := 0
		for _, err := range errs {
			switch {
			case err == nil:
				joined++
			case !errors.Is(err, store.ErrNotFound):
				t.Fatalf("JoinHost: %v, want success or ErrNotFound", err)
			}
		}
		hosts, err := s.ListHostIdentities(ctx(t))
		if joined != 3 || err != nil || len(hosts) != 3 {
			t.Fatalf("%d joins succeeded and %d hosts are listed (%v), want 3 of each", joined, len(hosts), err)
		}
	})

	t.Run("revoking keeps the first revocation time, and an unknown ID is not found", func(t *testing.T) {
		s := open(t)
		createJoinToken(t, s, joinToken("j1", 1))
		first, err := s.RevokeJoinToken(ctx(t), "j1", t0.Add(time.Second))
		if err != nil || !first.RevokedAt.Equal(t0.Add(time.Second)) || first.State(t0) != store.JoinTokenRevoked {
			t.Fatalf("RevokeJoinToken = %+v, %v", first, err)
		}
		again, err := s.RevokeJoinToken(ctx(t), "j1", t0.Add(time.Minute))
		if err != nil || !again.RevokedAt.Equal(first.RevokedAt) {
			t.Fatalf("second RevokeJoinToken = %+v, %v; want the first time kept", again, err)
		}
		if _, err := s.RevokeJoinToken(ctx(t), "nope", t0); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("RevokeJoinToken of an unknown ID: %v, want ErrNotFound", err)
		}
	})
}

// RunHostIdentities checks finding, listing and removing joined hosts.
func RunHostIdentities(t *testing.T, open Open) {
	t.Run("removing a host stamps it once, with one host.removed event", func(t *testing.T) {
		s := open(t)
		createJoinToken(t, s, joinToken("j1", 5))
		joinHost(t, s, "hash-of-j1", hostIdentity("h1", "alpha", t0))
		start := lastSeq(t, s)
		h, err := s.RemoveHost(ctx(t), "h1", t0.Add(time.Minute))
		if err != nil || !h.Removed() || !h.RemovedAt.Equal(t0.Add(time.Minute)) || h.Name != "alpha" {
			t.Fatalf("RemoveHost = %+v, %v", h, err)
		}
		again, err := s.RemoveHost(ctx(t), "h1", t0.Add(time.Hour))
		if err != nil || !again.RemovedAt.Equal(t0.Add(time.Minute)) {
			t.Fatalf("second RemoveHost = %+v, %v; want the first time kept", again, err)
		}
		evs := eventsSince(t, s, start)
		if !slices.Equal(types(evs), []store.EventType{store.EventHostRemoved}) || evs[0].Host != "h1" {
			t.Fatalf("events = %+v, want one host.removed for h1", evs)
		}
		byToken, err := s.HostByTokenHash(ctx(t), "token-of-h1")
		if err != nil || !byToken.Removed() {
			t.Fatalf("HostByTokenHash after removal = %+v, %v; want the host, removed", byToken, err)
		}
		if _, err := s.RemoveHost(ctx(t), "nope", t0); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("RemoveHost of an unknown host: %v, want ErrNotFound", err)
		}
	})

	t.Run("a removed host's name can be taken again, and a name finds its member first", func(t *testing.T) {
		s := open(t)
		createJoinToken(t, s, joinToken("j1", 5))
		joinHost(t, s, "hash-of-j1", hostIdentity("h1", "alpha", t0))
		if _, err := s.RemoveHost(ctx(t), "h1", t0.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		if h, err := s.FindHost(ctx(t), "alpha"); err != nil || h.ID != "h1" {
			t.Fatalf("FindHost(alpha) with only a removed alpha = %+v, %v; want h1", h, err)
		}
		joinHost(t, s, "hash-of-j1", hostIdentity("h2", "alpha", t0.Add(2*time.Second)))
		for query, want := range map[string]string{"alpha": "h2", "h1": "h1", "h2": "h2"} {
			if h, err := s.FindHost(ctx(t), query); err != nil || h.ID != want {
				t.Fatalf("FindHost(%s) = %+v, %v; want %s", query, h, err, want)
			}
		}
		if _, err := s.FindHost(ctx(t), "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("FindHost of an unknown host: %v, want ErrNotFound", err)
		}
		all, err := s.ListHostIdentities(ctx(t))
		if err != nil || len(all) != 2 || all[0].ID != "h1" || all[1].ID != "h2" {
			t.Fatalf("ListHostIdentities = %+v, %v; want h1 (removed) then h2", all, err)
		}
	})
}

// RunTokens checks the admin tokens: the first one's hash by name, and the
// named ones by hash, listed and revoked.
func RunTokens(t *testing.T, open Open) {
	t.Run("a hash is created once and never replaced", func(t *testing.T) {
		s := open(t)
		if _, err := s.TokenHash(ctx(t), "admin"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("TokenHash of no token: %v, want ErrNotFound", err)
		}
		if err := s.CreateTokenHash(ctx(t), "admin", "h1", t0); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateTokenHash(ctx(t), "admin", "h2", t0); !errors.Is(err, store.ErrExists) {
			t.Fatalf("second CreateTokenHash: %v, want ErrExists", err)
		}
		if h, err := s.TokenHash(ctx(t), "admin"); err != nil || h != "h1" {
			t.Fatalf("TokenHash = %q, %v; want the first hash", h, err)
		}
	})

	t.Run("a named admin token is found by its hash and listed with the first, oldest first, with a token.created event", func(t *testing.T) {
		s := open(t)
		if err := s.CreateTokenHash(ctx(t), "admin", "hash-of-admin", t0); err != nil {
			t.Fatal(err)
		}
		start := lastSeq(t, s)
		alice := store.AdminToken{Name: "alice", Kind: store.TokenAdmin, Hash: "hash-of-alice", CreatedAt: t0.Add(time.Minute)}
		if err := s.CreateAdminToken(ctx(t), alice, "admin"); err != nil {
			t.Fatal(err)
		}
		got, err := s.AdminTokenByHash(ctx(t), "hash-of-alice")
		if err != nil || got != alice {
			t.Fatalf("AdminTokenByHash = %+v, %v; want %+v", got, err, alice)
		}
		if first, err := s.AdminTokenByHash(ctx(t), "hash-of-admin"); err != nil || first.Name != "admin" || first.Revoked() {
			t.Fatalf("AdminTokenByHash of the first token = %+v, %v", first, err)
		}
		if _, err := s.AdminTokenByHash(ctx(t), "hash-of-nobody"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("AdminTokenByHash of an unknown hash: %v, want ErrNotFound", err)
		}
		all, err := s.ListAdminTokens(ctx(t))
		if err != nil || len(all) != 2 || all[0].Name != "admin" || all[1] != alice {
			t.Fatalf("ListAdminTokens = %+v, %v; want admin then alice", all, err)
		}
		evs := eventsSince(t, s, start)
		if !slices.Equal(types(evs), []store.EventType{store.EventTokenCreated}) || evs[0].Actor != "admin" ||
			!evs[0].Time.Equal(alice.CreatedAt) {
			t.Fatalf("events = %+v, want one token.created by admin", evs)
		}
	})

	t.Run("a deploy token keeps its project and exec right, shares the names of admin tokens and is revoked alike", func(t *testing.T) {
		s := open(t)
		if err := s.CreateAdminToken(ctx(t), store.AdminToken{Name: "alice", Hash: "h1", CreatedAt: t0}, "admin"); err != nil {
			t.Fatal(err)
		}
		start := lastSeq(t, s)
		ci := store.AdminToken{Name: "ci", Kind: store.TokenDeploy, Hash: "h2", CreatedAt: t0.Add(time.Minute), Project: "default/shop"}
		ops := store.AdminToken{Name: "ops", Kind: store.TokenDeploy, Hash: "h3", CreatedAt: t0.Add(2 * time.Minute),
			Project: "team/api", Exec: true}
		for _, tok := range []store.AdminToken{ci, ops} {
			if err := s.CreateAdminToken(ctx(t), tok, "alice"); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := s.AdminTokenByHash(ctx(t), "h3"); err != nil || got != ops {
			t.Fatalf("AdminTokenByHash = %+v, %v; want %+v", got, err, ops)
		}
		all, err := s.ListAdminTokens(ctx(t))
		if err != nil || len(all) != 3 || all[0].Kind != store.TokenAdmin || all[1] != ci || all[2] != ops {
			t.Fatalf("ListAdminTokens = %+v, %v; want alice (admin), ci, ops", all, err)
		}
		for _, tok := range []store.AdminToken{
			{Name: "alice", Kind: store.TokenDeploy, Hash: "h4", CreatedAt: t0, Project: "default/shop"}, // an admin token's name
			{Name: "ci", Hash: "h5", CreatedAt: t0},                                                      // a deploy token's name
		} {
			if err := s.CreateAdminToken(ctx(t), tok, "alice"); !errors.Is(err, store.ErrExists) {
				t.Fatalf("CreateAdminToken %+v: %v, want ErrExists", tok, err)
			}
		}
		for _, tok := range []store.AdminToken{
			{Name: "noproject", Kind: store.TokenDeploy, Hash: "h6", CreatedAt: t0},
			{Name: "adminproject", Kind: store.TokenAdmin, Hash: "h7", CreatedAt: t0, Project: "default/shop"},
			{Name: "oddkind", Kind: "root", Hash: "h8", CreatedAt: t0},
		} {
			if err := s.CreateAdminToken(ctx(t), tok, "alice"); err == nil || errors.Is(err, store.ErrExists) {
				t.Fatalf("CreateAdminToken %+v: %v, want it refused", tok, err)
			}
		}
		got, err := s.RevokeAdminToken(ctx(t), "ci", "alice", t0.Add(time.Hour))
		if err != nil || !got.Revoked() || got.Project != "default/shop" || !got.IsDeploy() {
			t.Fatalf("RevokeAdminToken(ci) = %+v, %v", got, err)
		}
		evs := eventsSince(t, s, start)
		want := []store.EventType{store.EventTokenCreated, store.EventTokenCreated, store.EventTokenRevoked}
		if !slices.Equal(types(evs), want) || evs[0].Project != "default/shop" || evs[2].Project != "default/shop" ||
			!strings.Contains(evs[0].Message, `deploy token "ci" of default/shop`) || evs[2].Actor != "alice" {
			t.Fatalf("events = %+v, want ci's creation, ops's, ci's revocation, each with its project", evs)
		}
	})

	t.Run("a name or a hash taken is refused, and nothing changes", func(t *testing.T) {
		s := open(t)
		if err := s.CreateAdminToken(ctx(t), store.AdminToken{Name: "alice", Hash: "h1", CreatedAt: t0}, "admin"); err != nil {
			t.Fatal(err)
		}
		start := lastSeq(t, s)
		for _, tok := range []store.AdminToken{
			{Name: "alice", Hash: "h2", CreatedAt: t0}, // the name
			{Name: "bob", Hash: "h1", CreatedAt: t0},   // the hash
		} {
			if err := s.CreateAdminToken(ctx(t), tok, "admin"); !errors.Is(err, store.ErrExists) {
				t.Fatalf("CreateAdminToken %+v: %v, want ErrExists", tok, err)
			}
		}
		if err := s.CreateTokenHash(ctx(t), "carol", "h1", t0); !errors.Is(err, store.ErrExists) {
			t.Fatalf("CreateTokenHash with a hash taken: %v, want ErrExists", err)
		}
		if evs := eventsSince(t, s, start); len(evs) != 0 {
			t.Fatalf("refused creations recorded events %+v", evs)
		}
		all, err := s.ListAdminTokens(ctx(t))
		if err != nil || len(all) != 1 || all[0].Hash != "h1" {
			t.Fatalf("ListAdminTokens = %+v, %v; want alice alone, as first made", all, err)
		}
	})

	t.Run("revoking keeps the first time and records one token.revoked event; the name is never reused", func(t *testing.T) {
		s := open(t)
		if err := s.CreateAdminToken(ctx(t), store.AdminToken{Name: "alice", Hash: "h1", CreatedAt: t0}, "admin"); err != nil {
			t.Fatal(err)
		}
		start := lastSeq(t, s)
		got, err := s.RevokeAdminToken(ctx(t), "alice", "bob", t0.Add(time.Second))
		if err != nil || !got.Revoked() || !got.RevokedAt.Equal(t0.Add(time.Second)) || got.Hash != "h1" {
			t.Fatalf("RevokeAdminToken = %+v, %v", got, err)
		}
		again, err := s.RevokeAdminToken(ctx(t), "alice", "bob", t0.Add(time.Minute))
		if err != nil || !again.RevokedAt.Equal(t0.Add(time.Second)) {
			t.Fatalf("second RevokeAdminToken = %+v, %v; want the first time kept", again, err)
		}
		evs := eventsSince(t, s, start)
		if !slices.Equal(types(evs), []store.EventType{store.EventTokenRevoked}) || evs[0].Actor != "bob" {
			t.Fatalf("events = %+v, want one token.revoked by bob", evs)
		}
		if byHash, err := s.AdminTokenByHash(ctx(t), "h1"); err != nil || !byHash.Revoked() {
			t.Fatalf("AdminTokenByHash after revocation = %+v, %v; want the token, revoked", byHash, err)
		}
		if err := s.CreateAdminToken(ctx(t), store.AdminToken{Name: "alice", Hash: "h2", CreatedAt: t0}, "admin"); !errors.Is(err, store.ErrExists) {
			t.Fatalf("a revoked token's name was taken again: %v, want ErrExists", err)
		}
		if _, err := s.RevokeAdminToken(ctx(t), "nobody", "bob", t0); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("RevokeAdminToken of an unknown name: %v, want ErrNotFound", err)
		}
	})
}

// RunActors checks that a write's context names who asked for it in every
// event it records (store.WithActor), unless the event names someone itself.
func RunActors(t *testing.T, open Open) {
	t.Run("events written with an actor's context carry the actor, given ones win", func(t *testing.T) {
		s := open(t)
		createJoinToken(t, s, joinToken("j1", 5))
		joinHost(t, s, "hash-of-j1", hostIdentity("h1", "alpha", t0))
		start := lastSeq(t, s)
		alice := store.WithActor(ctx(t), "alice")
		if _, err := s.RemoveHost(alice, "h1", t0.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AppendEvent(alice, store.Event{Time: t0, Type: store.EventRolloutRestarted, Project: "default/shop"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AppendEvent(alice, store.Event{Time: t0, Type: store.EventRolloutRestarted, Actor: "bob"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AppendEvent(ctx(t), store.Event{Time: t0, Type: store.EventRolloutDone}); err != nil {
			t.Fatal(err)
		}
		evs := eventsSince(t, s, start)
		var actors []string
		for _, e := range evs {
			actors = append(actors, e.Actor)
		}
		if want := []string{"alice", "alice", "bob", ""}; !slices.Equal(actors, want) {
			t.Fatalf("actors of %+v = %q, want %q", evs, actors, want)
		}
	})
}
