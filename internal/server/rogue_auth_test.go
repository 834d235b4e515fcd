package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/pki"
)

// The auth matrix's rows of "host A acting on host B's workloads": for
// every route a host token may call, mallory (a joined host, placed with
// web) tries it on alpha's workloads (db, built from a blob of its own),
// through its own {id} and through alpha's. The matrix's other rows check
// who may call a route; these check what a host may reach through the ones
// it may call.

// crossHostWorld is alpha, running db's slot 1, and mallory, running web.
type crossHostWorld struct {
	*rogueWorld
	alpha, mallory *rogueHost
	dbBlob         string // the blob alpha's db is built from
}

func newCrossHostWorld(t *testing.T) *crossHostWorld {
	w := &crossHostWorld{rogueWorld: newRogueWorld(t, DefaultConfig())}
	w.alpha, w.mallory = w.joinHost("alpha"), w.joinHost("mallory")
	w.dbBlob = w.sh.putBlob("FROM scratch\nCOPY db /\n")
	db := webOf("db", 2)
	db.Image, db.BlobID = "", w.dbBlob
	db.Secrets = []contract.SecretFile{{Name: "db_password", Handle: "h-db", Value: "s3cret-of-alpha"}}
	w.place(w.alpha, db)
	w.place(w.mallory, webOf("web", 1))
	w.alpha.report(nil, running(shopDB, 1)) // its slot 0 is not running
	w.mallory.report(nil, running("default/shop/web", 0))
	return w
}

// crossHostRows are what mallory tries on each route a host may call.
var crossHostRows = map[string]func(t *testing.T, w *crossHostWorld){
	"GET /api/v1/hosts/{id}/desired-state": func(t *testing.T, w *crossHostWorld) {
		got := w.mallory.poll()
		if slices.ContainsFunc(got.Workloads, func(ws contract.WorkloadSpec) bool { return ws.Egg == "db" }) {
			t.Errorf("mallory's desired state carries alpha's db: %+v", got.Workloads)
		}
		err := w.mallory.C.Do(t.Context(), "GET", "/api/v1/hosts/"+w.alpha.ID+"/desired-state", nil, &contract.DesiredState{})
		wantStatus(t, err, http.StatusForbidden, "mallory reading alpha's desired state")
	},
	"POST /api/v1/hosts/{id}/status": func(t *testing.T, w *crossHostWorld) {
		// In alpha's name: refused, by path and by body.
		body, _ := json.Marshal(contract.StatusReport{HostID: w.alpha.ID, Containers: []contract.ContainerStatus{running(shopDB, 0)}})
		err := w.mallory.C.Do(t.Context(), "POST", "/api/v1/hosts/"+w.alpha.ID+"/status", json.RawMessage(body), nil)
		wantStatus(t, err, http.StatusForbidden, "mallory reporting for alpha")
		wantStatus(t, w.mallory.reportRaw(body), http.StatusBadRequest, "mallory's report naming alpha")
		// In its own: stored, and acted on nowhere (before issue 24, its
		// lower slot won the exec).
		w.mallory.report(nil, running("default/shop/web", 0), running(shopDB, 0))
		op, err := w.admin.Sessions().Exec(t.Context(), "default", "shop", "db", url.Values{"cmd": {"sh"}})
		if err != nil {
			t.Fatal(err)
		}
		defer op.CloseNow()
		if got := w.mallory.offers(); len(got) != 0 {
			t.Errorf("mallory's claim of db got it %+v", got)
		}
		if got := w.alpha.offers(); len(got) != 1 {
			t.Errorf("alpha's offers %+v, want db's exec", got)
		}
	},
	"HEAD /api/v1/blobs/{digest}": func(t *testing.T, w *crossHostWorld) {
		resp, err := w.mallory.C.Send(t.Context(), "HEAD", "/api/v1/blobs/"+w.dbBlob, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("mallory's HEAD of alpha's blob: %d, want 403", resp.StatusCode)
		}
	},
	"GET /api/v1/blobs/{digest}": func(t *testing.T, w *crossHostWorld) {
		resp, err := w.mallory.C.Send(t.Context(), "GET", "/api/v1/blobs/"+w.dbBlob, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("mallory's GET of alpha's blob: %d, want 403", resp.StatusCode)
		}
	},
	"POST /api/v1/hosts/{id}/certificate": func(t *testing.T, w *crossHostWorld) {
		_, csr := newCSR(t, w.alpha.ID) // a CSR naming alpha
		var got api.JoinResponse
		err := w.mallory.C.Do(t.Context(), "POST", "/api/v1/hosts/"+w.alpha.ID+"/certificate", api.CertificateRequest{CSR: csr}, &got)
		wantStatus(t, err, http.StatusForbidden, "mallory renewing alpha's certificate")
		if err := w.mallory.C.Do(t.Context(), "POST", "/api/v1/hosts/"+w.mallory.ID+"/certificate", api.CertificateRequest{CSR: csr}, &got); err != nil {
			t.Fatal(err)
		}
		cert, err := pki.ParseCertificatePEM([]byte(got.Certificate))
		if err != nil {
			t.Fatal(err)
		}
		if id, err := pki.HostIDFromCert(cert); err != nil || id != w.mallory.ID {
			t.Errorf("mallory's certificate for a CSR naming alpha names %q (%v), want mallory only", id, err)
		}
	},
	"GET /api/v1/hosts/{id}/sessions": func(t *testing.T, w *crossHostWorld) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		op, err := w.admin.Sessions().Logs(ctx, "default", "shop", url.Values{"egg": {"db"}})
		if err != nil {
			t.Fatal(err)
		}
		defer op.CloseNow()
		if _, err := w.alpha.awaitOffer(ctx); err != nil {
			t.Fatal(err)
		}
		if got := w.mallory.offers(); len(got) != 0 {
			t.Errorf("mallory was offered db's logs: %+v", got)
		}
		err = w.mallory.C.Do(t.Context(), "GET", "/api/v1/hosts/"+w.alpha.ID+"/sessions?wait=0s", nil, &contract.SessionOffers{})
		wantStatus(t, err, http.StatusForbidden, "mallory polling alpha's sessions")
	},
	"GET /api/v1/hosts/{id}/sessions/{sid}/stream": func(t *testing.T, w *crossHostWorld) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		op, err := w.admin.Sessions().Exec(ctx, "default", "shop", "db", url.Values{"cmd": {"sh"}})
		if err != nil {
			t.Fatal(err)
		}
		defer op.CloseNow()
		offer, err := w.alpha.awaitOffer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = w.mallory.stream(ctx, offer.ID)
		wantStatus(t, err, http.StatusNotFound, "mallory's stream for alpha's session")
		_, err = w.mallory.C.Dial(ctx, streamPath(w.alpha.ID, offer.ID))
		wantStatus(t, err, http.StatusForbidden, "mallory's stream in alpha's name")
	},
}

// TestAHostActsOnlyOnWhatIsPlacedOnIt walks the server's routes: each one a
// host token may call has its row above, or the test fails.
func TestAHostActsOnlyOnWhatIsPlacedOnIt(t *testing.T) {
	probe := newSecureHarness(t, DefaultConfig())
	for _, rt := range probe.srv.routeTable() {
		switch audiences[rt.pattern] {
		case ownHostAudience, blobAudience, selfHostAudience:
		default:
			continue
		}
		row, ok := crossHostRows[rt.pattern]
		if !ok {
			t.Errorf("a host token may call %s, which has no row in crossHostRows (rogue_auth_test.go)", rt.pattern)
			continue
		}
		t.Run(rt.pattern, func(t *testing.T) {
			w := newCrossHostWorld(t)
			row(t, w)
			w.sh.checkNoSecretLeaked()
		})
	}
}
