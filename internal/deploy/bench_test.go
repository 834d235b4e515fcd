package deploy_test

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/blob"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/deploy"
	"github.com/hatchery/hatchery/internal/desired"
	"github.com/hatchery/hatchery/internal/imageref/imagereftest"
	"github.com/hatchery/hatchery/internal/provider"
	"github.com/hatchery/hatchery/internal/seal"
	"github.com/hatchery/hatchery/internal/spec"
	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/postgres"
	"github.com/hatchery/hatchery/internal/store/sqlite"
	"github.com/hatchery/hatchery/internal/store/storetest"
	"github.com/hatchery/hatchery/internal/testutil/pgtest"
)

// benchService is the apply protocol over st, with one joined host that is
// up, so eggs are placed.
func benchService(b *testing.B, st storetest.FullStore) *deploy.Service {
	b.Helper()
	log := zap.NewNop()
	blobs, err := blob.Open(filepath.Join(b.TempDir(), "blobs"))
	if err != nil {
		b.Fatal(err)
	}
	box, err := seal.New(bytes.Repeat([]byte{1}, 32))
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	if err := st.CreateJoinToken(b.Context(), store.JoinToken{ID: "jt", Hash: "jh", CreatedAt: now, ExpiresAt: now.Add(time.Hour), MaxUses: 1}); err != nil {
		b.Fatal(err)
	}
	if err := st.JoinHost(b.Context(), "jh", store.HostIdentity{ID: "h1", Name: "node-1", TokenHash: "th", JoinedAt: now}); err != nil {
		b.Fatal(err)
	}
	if _, err := st.PutStatus(b.Context(), "h1", []byte(`{"host_id":"h1"}`), now); err != nil {
		b.Fatal(err)
	}
	set, err := provider.New(provider.Deps{Deps: desired.Deps{Desired: st, Statuses: st, Records: st, Events: st, Secrets: st,
		Fleet: desired.StoreFleet{List: st, Identities: st, Reports: st}, Box: box, Logger: log, Now: time.Now}})
	if err != nil {
		b.Fatal(err)
	}
	s, err := deploy.New(deploy.DefaultConfig(), deploy.Deps{Resources: st, Plans: st, Leases: st, Applies: st,
		Projects: st, Events: st, Reports: st, Sources: blobs, Providers: set, Images: imagereftest.New(), ServerID: "srv-bench", Logger: log, Now: time.Now})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	return s
}

// fiftyResources is a project of 50 resources: 20 eggs, 10 networks, 10
// volumes, 10 secrets; version changes every egg's inputs and every
// secret's value.
func fiftyResources(b *testing.B, version int) api.PlanRequest {
	var y strings.Builder
	y.WriteString("project: bench\neggs:\n")
	for i := range 20 {
		fmt.Fprintf(&y, "  e%d:\n    image: registry.local/e:1\n    env: {V: \"%d\", S: \"${secret.s%d}\"}\n    networks: [n%d]\n    secrets: [s%d]\n",
			i, version, i%10, i%10, i%10)
		if i < 10 {
			fmt.Fprintf(&y, "    volumes: [\"v%d:/data\"]\n", i)
		}
	}
	secrets := map[string]string{}
	y.WriteString("networks:\n")
	for i := range 10 {
		fmt.Fprintf(&y, "  n%d: {}\n", i)
	}
	y.WriteString("volumes:\n")
	for i := range 10 {
		fmt.Fprintf(&y, "  v%d: {}\n", i)
	}
	y.WriteString("secrets:\n")
	for i := range 10 {
		fmt.Fprintf(&y, "  s%d: {env: S%d}\n", i, i)
		secrets[fmt.Sprint("s", i)] = fmt.Sprint("value-", version, "-", i)
	}
	p, err := spec.Parse([]byte(y.String()), "hatch.yaml", spec.Options{})
	if err != nil {
		b.Fatalf("parse: %v\n%s", err, y.String())
	}
	rs, deps := p.Resources()
	if len(rs) != 50 {
		b.Fatalf("the project has %d resources, want 50", len(rs))
	}
	return client.NewPlanRequest(rs, deps, secrets)
}

// applies runs n plan-and-apply rounds of the 50-resource project, each
// changing every egg and secret, and returns applies per second.
func applies(b *testing.B, s *deploy.Service, n int) float64 {
	b.Helper()
	start := time.Now()
	for i := range n {
		plan, err := s.Plan(b.Context(), "default/bench", fiftyResources(b, i))
		if err != nil {
			b.Fatal(err)
		}
		j, err := s.Apply(b.Context(), "default/bench", plan.ID)
		if err != nil {
			b.Fatal(err)
		}
		if last := waitFinished(b, j); last.Outcome != string(store.ApplySucceeded) {
			b.Fatalf("apply %d finished %+v", i, last)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

func waitFinished(b *testing.B, j *deploy.Job) api.Progress {
	var seq int64
	for {
		steps, over, changed := j.Since(seq)
		for _, p := range steps {
			seq = p.Seq
			if p.Status == api.StatusFinished {
				return p
			}
		}
		if over {
			b.Fatal("the job ended without a finished step")
		}
		<-changed
	}
}

// BenchmarkApplyThroughput: applies per second of a 50-resource project
// (plan, apply, every egg and secret changed) on each store, in the same
// run, and PostgreSQL's rate over SQLite's.
func BenchmarkApplyThroughput(b *testing.B) {
	const rounds = 10
	sq, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "hatch.db"), zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sq.Close() })
	pg := pgtest.Shared(b)
	ps, err := postgres.Open(b.Context(), pg.NewSchema(b), zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ps.Close() })
	sqSvc, pgSvc := benchService(b, sq), benchService(b, ps)
	applies(b, sqSvc, 1) // the first apply creates; the rounds update
	applies(b, pgSvc, 1)
	var sqRate, pgRate float64
	b.ResetTimer()
	for range b.N {
		sqRate += applies(b, sqSvc, rounds)
		pgRate += applies(b, pgSvc, rounds)
	}
	b.ReportMetric(sqRate/float64(b.N), "sqlite-applies/s")
	b.ReportMetric(pgRate/float64(b.N), "postgres-applies/s")
	b.ReportMetric(pgRate/sqRate, "postgres/sqlite")
}
