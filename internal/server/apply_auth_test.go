package server

import (
	"testing"

	"github.com/hatchery/hatchery/internal/provider"
	"github.com/hatchery/hatchery/internal/store/sqlite"
)

// The apply endpoints join the auth matrix: they exist only with
// Deps.Apply, and only the admin may call them.
func init() {
	secureDeps = append(secureDeps, func(t *testing.T, d *Deps, st *sqlite.Store) {
		set, err := provider.New(provider.Deps{Desired: st, Statuses: st, Records: st, Events: st, Secrets: st,
			Fleet: provider.StoreFleet{List: st, Identities: st, Reports: st}, Box: d.Box, Logger: d.Logger, Now: d.Now})
		if err != nil {
			t.Fatal(err)
		}
		d.Apply = &ApplyDeps{Resources: st, Plans: st, Leases: st, Providers: set, ServerID: "srv-matrix"}
	})
	const p = "/api/v1/projects/{namespace}/{project}"
	for _, route := range []string{
		"POST " + p + "/plan", "POST " + p + "/destroy", "POST " + p + "/apply",
		"GET " + p + "/applies/{id}", "GET " + p + "/applies/{id}/events", "POST " + p + "/eggs/{egg}/restart",
	} {
		audiences[route] = adminAudience
	}
}
