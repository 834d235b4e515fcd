package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/fleet"
)

// newReportingServer is a server as `hatch server` wires it (tokens from
// the store, so a host that joins reports with its own token), listening on
// loopback or not as loopbackMesh says (fleet.Config.LoopbackMesh, which
// runServer sets from its listener).
func newReportingServer(t *testing.T, loopbackMesh bool) *harness {
	t.Helper()
	log := zaptest.NewLogger(t)
	ts := newTokenStore(t, log, time.Now())
	st, admin := ts.st, ts.admin
	fc := fleet.DefaultConfig()
	fc.LoopbackMesh = loopbackMesh
	b := BuildTestServer(t, DefaultConfig(), TestWiring{Dir: ts.dir, Store: st, Auth: NewTokenAuth(ts.hash, st, time.Now),
		Fleet: fc, Logger: log})
	hs := httptest.NewServer(b.Server.Handler())
	t.Cleanup(hs.Close)
	return &harness{t: t, srv: b.Server, http: hs, store: st, blobs: b.Blobs, box: b.Box, fleet: b.Fleet, token: admin}
}

// joinHost joins a host for real: a join token from the API, then the join.
func (h *harness) joinHost(t *testing.T, name string) (hostID, hostToken string) {
	t.Helper()
	jt := decode[api.JoinToken](t, h.do("POST", "/api/v1/join-tokens", strings.NewReader(`{"uses": 1}`)), http.StatusCreated)
	got := decode[api.JoinResponse](t, h.doAs(jt.Token, "POST", "/api/v1/join", strings.NewReader(`{"name": "`+name+`"}`)), http.StatusCreated)
	return got.HostID, got.Token
}

// reportMesh posts a report carrying addrs with the host's own token and
// returns the answer.
func (h *harness) reportMesh(t *testing.T, hostID, hostToken string, addrs ...string) *http.Response {
	t.Helper()
	body, err := json.Marshal(contract.StatusReport{HostID: hostID, Time: time.Now(), MeshAddresses: addrs})
	if err != nil {
		t.Fatal(err)
	}
	return h.doAs(hostToken, "POST", "/api/v1/hosts/"+hostID+"/status", bytes.NewReader(body))
}

// storedMesh is the mesh addresses of the host's stored report: what the
// control plane hands to every peer.
func (h *harness) storedMesh(t *testing.T, hostID string) []string {
	t.Helper()
	d := decode[api.HostDetail](t, h.do("GET", "/api/v1/hosts/"+hostID, nil), http.StatusOK)
	if d.Status == nil {
		return nil
	}
	return d.Status.MeshAddresses
}

// A host that joined for real reports, with its own token, mesh addresses
// no peer should dial (issue 24, finding 8: "169.254.169.254:80",
// "127.0.0.1:2375" and "not an address" were handed to every peer, which
// dials them): the report is refused 400 naming the address and the rule,
// and what the control plane hands to peers stays the last good report's.
func TestAReportWithAMeshAddressNoPeerMayDialIsRefused(t *testing.T) {
	h := newReportingServer(t, false) // a server reached over the network
	id, token := h.joinHost(t, "rogue")
	good := []string{"10.20.0.7:7702", "[fd00::7]:7702"}
	if resp := h.reportMesh(t, id, token, good...); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("a report with good addresses: %d", resp.StatusCode)
	}
	many := make([]string, contract.MaxMeshAddresses+1)
	for i := range many {
		many[i] = fmt.Sprintf("10.20.1.%d:7702", i+1)
	}
	for _, tc := range []struct {
		name     string
		addrs    []string
		mentions string
	}{
		{"the cloud's metadata service", []string{"10.20.0.7:7702", "169.254.169.254:80"}, `"169.254.169.254:80": a link-local address`},
		{"the peers' own Docker API", []string{"127.0.0.1:2375"}, `"127.0.0.1:2375": a loopback address`},
		{"mapped to loopback", []string{"[::ffff:127.0.0.1]:2375"}, "loopback"},
		{"not an address", []string{"not an address"}, "want ip:port"},
		{"a host name", []string{"db.internal:7702"}, "want ip:port"},
		{"unspecified", []string{"0.0.0.0:7702"}, "unspecified"},
		{"multicast", []string{"239.1.2.3:7702"}, "multicast"},
		{"too many", many, "at most 16"},
	} {
		wantError(t, h.reportMesh(t, id, token, tc.addrs...), http.StatusBadRequest, string(api.CodeBadRequest), tc.mentions)
		if got := h.storedMesh(t, id); !slices.Equal(got, good) {
			t.Fatalf("%s: the stored mesh addresses are %v, want the last good report's %v", tc.name, got, good)
		}
	}
}

// A server listening on loopback shares its machine with its agents (`hatch
// up`, tests): it takes their loopback mesh addresses, and still refuses
// the rest.
func TestAServerOnLoopbackTakesLoopbackMeshAddresses(t *testing.T) {
	h := newReportingServer(t, true)
	id, token := h.joinHost(t, "local")
	if resp := h.reportMesh(t, id, token, "127.0.0.1:7702"); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("a loopback address on a loopback server: %d", resp.StatusCode)
	}
	if got := h.storedMesh(t, id); !slices.Equal(got, []string{"127.0.0.1:7702"}) {
		t.Fatalf("stored %v", got)
	}
	wantError(t, h.reportMesh(t, id, token, "169.254.169.254:80"), http.StatusBadRequest, string(api.CodeBadRequest), "link-local")
}
