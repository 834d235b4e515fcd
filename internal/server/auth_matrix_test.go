package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/resource"
)

// audience is who may call an endpoint.
type audience int

const (
	// adminAudience: the admin token only.
	adminAudience audience = iota
	// ownHostAudience: the admin, and a host token for its own {id}.
	ownHostAudience
	// blobAudience: the admin, and a host whose desired state references {digest}.
	blobAudience
	// joinAudience: a usable join token only.
	joinAudience
	// selfHostAudience: a host token for its own {id}; not the admin.
	selfHostAudience
	// projectAudience: the admin, and a deploy token of the path's project.
	projectAudience
	// projectExecAudience: the admin, and a deploy token of the path's
	// project made with --exec.
	projectExecAudience
	// deployAudience: the admin, and every deploy token (the handler
	// narrows what it gets to its project, or the route names none).
	deployAudience
	// blobCheckAudience: blobAudience, and every deploy token (which asks
	// before it uploads a build context).
	blobCheckAudience
)

// audiences says who may call each endpoint of the server. The matrix walks
// the server's own route table and fails on an endpoint missing here: a new
// endpoint must say who may call it.
var audiences = map[string]audience{
	"GET /api/v1/hosts":                                 adminAudience,
	"GET /api/v1/hosts/{id}":                            adminAudience,
	"GET /api/v1/hosts/{id}/desired-state":              ownHostAudience,
	"POST /api/v1/hosts/{id}/status":                    ownHostAudience,
	"PUT /api/v1/blobs/{digest}":                        deployAudience,
	"HEAD /api/v1/blobs/{digest}":                       blobCheckAudience,
	"GET /api/v1/blobs/{digest}":                        blobAudience,
	"GET /api/v1/events":                                deployAudience,
	"GET /api/v1/certificates":                          adminAudience,
	"GET /api/v1/projects":                              deployAudience,
	"GET /api/v1/projects/{namespace}/{project}":        projectAudience,
	"GET /api/v1/projects/{namespace}/{project}/status": projectAudience,
	"GET /metrics":                                      adminAudience,
	"POST /api/v1/join":                                 joinAudience,
	"POST /api/v1/join-tokens":                          adminAudience,
	"GET /api/v1/join-tokens":                           adminAudience,
	"DELETE /api/v1/join-tokens/{id}":                   adminAudience,
	"POST /api/v1/admin-tokens":                         adminAudience,
	"GET /api/v1/admin-tokens":                          adminAudience,
	"DELETE /api/v1/admin-tokens/{name}":                adminAudience,
	"DELETE /api/v1/hosts/{id}":                         adminAudience,
	// A host that could set its own capacity would draw every new replica.
	"PUT /api/v1/hosts/{id}/capacity": adminAudience,
	// Registry logins are the cluster's: a pipeline gives its project's
	// in registries:.
	"PUT /api/v1/registries/{host}":                adminAudience,
	"DELETE /api/v1/registries/{host}":             adminAudience,
	"GET /api/v1/registries":                       adminAudience,
	"POST /api/v1/hosts/{id}/certificate":          selfHostAudience,
	"GET /api/v1/hosts/{id}/sessions":              selfHostAudience,
	"GET /api/v1/hosts/{id}/sessions/{sid}/stream": selfHostAudience,

	"POST /api/v1/projects/{namespace}/{project}/plan": projectAudience,
	// A pipeline deploys; tearing a project down is an admin's decision.
	"POST /api/v1/projects/{namespace}/{project}/destroy":            adminAudience,
	"POST /api/v1/projects/{namespace}/{project}/apply":              projectAudience,
	"POST /api/v1/projects/{namespace}/{project}/rollback":           projectAudience,
	"GET /api/v1/projects/{namespace}/{project}/applies":             projectAudience,
	"GET /api/v1/projects/{namespace}/{project}/applies/{id}":        projectAudience,
	"GET /api/v1/projects/{namespace}/{project}/applies/{id}/events": projectAudience,
	"POST /api/v1/projects/{namespace}/{project}/eggs/{egg}/restart": adminAudience,
	"GET /api/v1/projects/{namespace}/{project}/logs":                projectAudience,
	"GET /api/v1/projects/{namespace}/{project}/eggs/{egg}/exec":     projectExecAudience,
	// A run is a command in a new container of an egg: exec's right.
	// Reading runs and schedules, and pausing one, are the project's.
	"POST /api/v1/projects/{namespace}/{project}/eggs/{egg}/runs":        projectExecAudience,
	"GET /api/v1/projects/{namespace}/{project}/runs":                    projectAudience,
	"GET /api/v1/projects/{namespace}/{project}/runs/{id}":               projectAudience,
	"POST /api/v1/projects/{namespace}/{project}/runs/{id}/stop":         projectExecAudience,
	"GET /api/v1/projects/{namespace}/{project}/runs/{id}/attach":        projectExecAudience,
	"GET /api/v1/projects/{namespace}/{project}/schedules":               projectAudience,
	"POST /api/v1/projects/{namespace}/{project}/schedules/{egg}/run":    projectExecAudience,
	"POST /api/v1/projects/{namespace}/{project}/schedules/{egg}/pause":  projectAudience,
	"POST /api/v1/projects/{namespace}/{project}/schedules/{egg}/resume": projectAudience,
	// Backups and restores are the project's; a backup's data travels
	// through its own host's routes only (the service checks the task is
	// that host's: TestAHostTokenReachesOnlyItsOwnVolumeTasks).
	"POST /api/v1/projects/{namespace}/{project}/volumes/{volume}/backups":               projectAudience,
	"GET /api/v1/projects/{namespace}/{project}/backups":                                 projectAudience,
	"GET /api/v1/projects/{namespace}/{project}/volume-tasks/{id}":                       projectAudience,
	"POST /api/v1/projects/{namespace}/{project}/volumes/{volume}/restore":               projectAudience,
	"DELETE /api/v1/projects/{namespace}/{project}/backups/{id}":                         projectAudience,
	"DELETE /api/v1/projects/{namespace}/{project}/volumes/{volume}/stale-copies/{host}": projectAudience,
	"POST /api/v1/hosts/{id}/volume-tasks/{task}/missing":                                ownHostAudience,
	"PUT /api/v1/hosts/{id}/volume-tasks/{task}/chunks/{chunk}":                          ownHostAudience,
	"PUT /api/v1/hosts/{id}/volume-tasks/{task}/manifest/{manifest}":                     ownHostAudience,
	"GET /api/v1/hosts/{id}/volume-tasks/{task}/manifest":                                ownHostAudience,
	"GET /api/v1/hosts/{id}/volume-tasks/{task}/chunks/{chunk}":                          ownHostAudience,
}

// admitted is the status of a request let in, for the endpoints whose
// request the matrix knows how to make right. Others are checked to be
// neither refused (401, 403, 429) nor unrouted (404 no endpoint, 405).
var admitted = map[string]int{
	"GET /api/v1/hosts":                                    200,
	"GET /api/v1/hosts/{id}":                               200,
	"GET /api/v1/hosts/{id}/desired-state":                 200,
	"POST /api/v1/hosts/{id}/status":                       204,
	"PUT /api/v1/blobs/{digest}":                           200, // it is there already
	"HEAD /api/v1/blobs/{digest}":                          200,
	"GET /api/v1/blobs/{digest}":                           200,
	"GET /api/v1/events":                                   200,
	"GET /api/v1/certificates":                             200,
	"GET /api/v1/projects":                                 200,
	"GET /api/v1/projects/{namespace}/{project}":           200,
	"GET /api/v1/projects/{namespace}/{project}/status":    200,
	"GET /metrics":                                         200,
	"POST /api/v1/join":                                    201,
	"POST /api/v1/join-tokens":                             201,
	"GET /api/v1/join-tokens":                              200,
	"DELETE /api/v1/join-tokens/{id}":                      200,
	"POST /api/v1/admin-tokens":                            201,
	"GET /api/v1/admin-tokens":                             200,
	"DELETE /api/v1/admin-tokens/{name}":                   200,
	"DELETE /api/v1/hosts/{id}":                            200,
	"PUT /api/v1/hosts/{id}/capacity":                      200,
	"POST /api/v1/hosts/{id}/certificate":                  200,
	"GET /api/v1/hosts/{id}/sessions":                      200,
	"GET /api/v1/hosts/{id}/sessions/{sid}/stream":         404, // no such session
	"GET /api/v1/projects/{namespace}/{project}/runs":      200,
	"GET /api/v1/projects/{namespace}/{project}/runs/{id}": 404, // no such run
	"GET /api/v1/projects/{namespace}/{project}/schedules": 200,
	// web is deployed, with no schedule; egg x is not.
	"POST /api/v1/projects/{namespace}/{project}/eggs/{egg}/runs":        404,
	"POST /api/v1/projects/{namespace}/{project}/runs/{id}/stop":         404,
	"GET /api/v1/projects/{namespace}/{project}/runs/{id}/attach":        404,
	"POST /api/v1/projects/{namespace}/{project}/schedules/{egg}/run":    404,
	"POST /api/v1/projects/{namespace}/{project}/schedules/{egg}/pause":  404,
	"POST /api/v1/projects/{namespace}/{project}/schedules/{egg}/resume": 404,
	// No volume x, no task of that ID: let in, and not found.
	"POST /api/v1/projects/{namespace}/{project}/volumes/{volume}/backups":               404,
	"GET /api/v1/projects/{namespace}/{project}/backups":                                 200,
	"GET /api/v1/projects/{namespace}/{project}/volume-tasks/{id}":                       404,
	"POST /api/v1/projects/{namespace}/{project}/volumes/{volume}/restore":               404,
	"DELETE /api/v1/projects/{namespace}/{project}/backups/{id}":                         404,
	"DELETE /api/v1/projects/{namespace}/{project}/volumes/{volume}/stale-copies/{host}": 404,
	"POST /api/v1/hosts/{id}/volume-tasks/{task}/missing":                                404,
	"PUT /api/v1/hosts/{id}/volume-tasks/{task}/chunks/{chunk}":                          404,
	"PUT /api/v1/hosts/{id}/volume-tasks/{task}/manifest/{manifest}":                     404,
	"GET /api/v1/hosts/{id}/volume-tasks/{task}/manifest":                                404,
	"GET /api/v1/hosts/{id}/volume-tasks/{task}/chunks/{chunk}":                          404,
}

// caller is one kind of token the matrix tries.
type caller struct {
	name  string
	token string
	// known says whether the server accepts the token at all (else 401).
	known bool
	// in says whether the caller may call an endpoint of the audience (else 403).
	in func(audience) bool
}

// matrixWorld is one server with every kind of token, and the names the
// paths are made of.
type matrixWorld struct {
	sh          *secureHarness
	callers     []caller
	alpha       string // the right host's ID
	digest      string // a blob alpha's desired state references
	joinTokenID string
	alphaReport string
	csrBody     string // a certificate request's body
}

func newMatrixWorld(t *testing.T) *matrixWorld {
	sh := newSecureHarness(t, DefaultConfig())
	w := &matrixWorld{sh: sh}
	live, liveID := sh.createJoinToken(time.Hour, 100)
	w.joinTokenID = liveID
	expired, _ := sh.createJoinToken(time.Minute, 100)
	alpha, alphaTok := sh.join(live, "alpha")
	_, betaTok := sh.join(live, "beta")
	gone, goneTok := sh.join(live, "gone")
	named := sh.createAdminToken(sh.token, "named")
	revoked := sh.createAdminToken(sh.token, "revoked")
	shopCI := sh.createDeployToken(sh.token, "shop-ci", "default", "shop", false)
	shopExec := sh.createDeployToken(sh.token, "shop-exec", "default", "shop", true)
	otherCI := sh.createDeployToken(sh.token, "other-ci", "default", "other", true)
	revokedCI := sh.createDeployToken(sh.token, "revoked-ci", "default", "shop", true)
	decode[api.AdminToken](t, sh.do("DELETE", "/api/v1/admin-tokens/revoked-ci", nil), http.StatusOK)
	sh.createAdminToken(sh.token, "victim") // what DELETE /api/v1/admin-tokens/{name} revokes
	decode[api.AdminToken](t, sh.do("DELETE", "/api/v1/admin-tokens/revoked", nil), http.StatusOK)
	decode[api.RemovedHost](t, sh.do("DELETE", "/api/v1/hosts/"+gone, nil), http.StatusOK)
	sh.clock.Set(sh.clock.Now().Add(2 * time.Minute)) // expired expires; live lives on
	w.alpha = alpha
	w.digest = sh.putBlob("FROM scratch\n")
	sh.setDesired(alpha, w.digest)
	if err := sh.store.PutResource(t.Context(), "default/shop", &resource.Deployed{ID: "w1", Type: "egg", Name: "web"}); err != nil {
		t.Fatal(err)
	}
	w.alphaReport = `{"host_id": "` + alpha + `", "version": "", "containers": []}`
	_, csr := newCSR(t, alpha)
	body, _ := json.Marshal(api.CertificateRequest{CSR: csr})
	w.csrBody = string(body)

	never := func(audience) bool { return false }
	w.callers = []caller{
		{"no token", "", false, never},
		{"a malformed token", "hatch-admin.not-a-token", false, never},
		{"an expired join token", expired, false, never},
		{"a removed host's token", goneTok, false, never},
		{"a revoked admin token", revoked, false, never},
		{"a revoked deploy token of the project", revokedCI, false, never},
		{"another host's token", betaTok, true, never},
		{"a usable join token", live, true, func(a audience) bool { return a == joinAudience }},
		{"the right host's token", alphaTok, true, func(a audience) bool {
			return a == ownHostAudience || a == blobAudience || a == blobCheckAudience || a == selfHostAudience
		}},
		// Deploy tokens: of the path's project (default/shop), without and
		// with --exec, and of another project, with --exec.
		{"the project's deploy token", shopCI, true, func(a audience) bool {
			return a == projectAudience || a == deployAudience || a == blobCheckAudience
		}},
		{"the project's deploy token with exec", shopExec, true, func(a audience) bool {
			return a == projectAudience || a == projectExecAudience || a == deployAudience || a == blobCheckAudience
		}},
		{"another project's deploy token with exec", otherCI, true, func(a audience) bool {
			return a == deployAudience || a == blobCheckAudience
		}},
		// The admins go last: their calls may change the world (remove alpha).
		{"a named admin token", named, true, adminIn},
		{"the admin token", sh.token, true, adminIn},
	}
	return w
}

// adminIn says an admin may call every endpoint but joining and a host's
// own.
func adminIn(a audience) bool { return a != joinAudience && a != selfHostAudience }

var wildcard = regexp.MustCompile(`\{[a-z]+\}`)

// request makes the method, path and body of a call to the endpoint.
func (w *matrixWorld) request(pattern string) (method, path string, body io.Reader) {
	method, path, _ = strings.Cut(pattern, " ")
	values := map[string]string{"{digest}": w.digest, "{namespace}": "default", "{project}": "shop", "{id}": w.alpha,
		"{name}": "victim", "{host}": "ghcr.io", "{task}": "0123456789abcdef", "{chunk}": strings.Repeat("ab", 32),
		"{manifest}": strings.Repeat("cd", 32)}
	if strings.HasPrefix(path, "/api/v1/join-tokens/") {
		values["{id}"] = w.joinTokenID
	}
	if strings.HasPrefix(path, "/api/v1/projects/") && (strings.Contains(path, "/volume-tasks/") || strings.Contains(path, "/backups/")) {
		values["{id}"] = "0123456789abcdef" // a volume task's ID
	}
	path = wildcard.ReplaceAllStringFunc(path, func(name string) string {
		if v, ok := values[name]; ok {
			return v
		}
		return "x"
	})
	switch pattern {
	case "POST /api/v1/hosts/{id}/status":
		return method, path, strings.NewReader(w.alphaReport)
	case "PUT /api/v1/blobs/{digest}":
		return method, path, strings.NewReader("FROM scratch\n")
	case "POST /api/v1/hosts/{id}/certificate":
		return method, path, strings.NewReader(w.csrBody)
	case "PUT /api/v1/hosts/{id}/capacity":
		return method, path, strings.NewReader(`{"memory_bytes": 8589934592, "milli_cpu": 4000}`)
	case "PUT /api/v1/registries/{host}":
		return method, path, strings.NewReader(`{"username": "ci", "password": "matrix-pass"}`)
	case "POST /api/v1/hosts/{id}/volume-tasks/{task}/missing":
		return method, path, strings.NewReader(`[]`)
	case "POST /api/v1/join", "POST /api/v1/admin-tokens":
		return method, path, strings.NewReader(`{"name": "n` + time.Now().Format("150405.000000000") + `"}`)
	}
	if method == "POST" || method == "PUT" {
		return method, path, strings.NewReader(`{}`)
	}
	return method, path, nil
}

// TestAuthMatrix calls every endpoint of the server with every kind of token
// and checks each answer: 401 for a token not accepted, 403 for one that may
// not call the endpoint, and the endpoint's own answer otherwise. The limit
// on failed authentications is out of reach (the harness's default).
func TestAuthMatrix(t *testing.T) {
	walkAuthMatrix(t, false)
}

// TestAuthMatrixWhileTheAddressIsRateLimited walks the same matrix from an
// address over the limit on failed authentications (one behind the same NAT
// kept failing): every valid token gets exactly the answer it gets otherwise
// (admitted, or 403), and only the tokens not accepted are refused, with 429.
func TestAuthMatrixWhileTheAddressIsRateLimited(t *testing.T) {
	walkAuthMatrix(t, true)
}

func walkAuthMatrix(t *testing.T, limited bool) {
	probe := newSecureHarness(t, DefaultConfig())
	for _, rt := range probe.srv.routeTable() {
		who, ok := audiences[rt.pattern]
		if !ok {
			t.Errorf("endpoint %s is not in the auth matrix: add it to audiences (and admitted) in auth_matrix_test.go", rt.pattern)
			continue
		}
		t.Run(rt.pattern, func(t *testing.T) {
			w := newMatrixWorld(t) // each endpoint its own world: admin calls change it
			if limited {
				w.limitCaller(t)
			}
			for _, c := range w.callers {
				method, path, body := w.request(rt.pattern)
				resp := w.sh.doAs(c.token, method, path, body)
				text := readAll(t, resp.Body)
				switch {
				case c.in(who):
					checkAdmitted(t, rt.pattern, c.name, resp, text)
				case c.known:
					checkRefused(t, rt.pattern, c.name, resp, text, http.StatusForbidden, "forbidden")
				case limited:
					checkRefused(t, rt.pattern, c.name, resp, text, http.StatusTooManyRequests, "rate_limited")
				default:
					checkRefused(t, rt.pattern, c.name, resp, text, http.StatusUnauthorized, "unauthorized")
				}
			}
			w.sh.checkNoSecretLeaked()
		})
	}
}

// limitCaller puts the test's own address (the harness serves on loopback)
// over the limit on failed authentications, by failing through the API as
// many times as the server's burst allows; the clock stands still, so no
// failure is forgiven while the matrix is walked.
func (w *matrixWorld) limitCaller(t *testing.T) {
	t.Helper()
	for i := range DefaultConfig().AuthFailureBurst {
		resp := w.sh.doAs("hatch-admin.guess", "GET", "/api/v1/hosts", nil)
		checkRefused(t, "GET /api/v1/hosts", fmt.Sprintf("failure %d", i+1), resp, readAll(t, resp.Body),
			http.StatusUnauthorized, "unauthorized")
	}
	resp := w.sh.doAs("hatch-admin.guess", "GET", "/api/v1/hosts", nil)
	checkRefused(t, "GET /api/v1/hosts", "a failure over the limit", resp, readAll(t, resp.Body),
		http.StatusTooManyRequests, "rate_limited")
}

func checkAdmitted(t *testing.T, pattern, who string, resp *http.Response, body string) {
	t.Helper()
	if want, known := admitted[pattern]; known {
		if resp.StatusCode != want {
			t.Errorf("%s with %s: %d %s, want %d", pattern, who, resp.StatusCode, body, want)
		}
		return
	}
	for _, refused := range []string{`"unauthorized"`, `"forbidden"`, `"rate_limited"`, `"method_not_allowed"`, "no endpoint"} {
		if strings.Contains(body, refused) {
			t.Errorf("%s with %s: %d %s, want it let in", pattern, who, resp.StatusCode, body)
		}
	}
}

func checkRefused(t *testing.T, pattern, who string, resp *http.Response, body string, status int, code string) {
	t.Helper()
	wantBody := `"error":"` + code + `"`
	if resp.Request.Method == "HEAD" {
		wantBody = "" // a HEAD answer has no body; its headers still say JSON
	}
	if resp.StatusCode != status || !strings.Contains(body, wantBody) || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("%s with %s: %d %s, want %d with a JSON %s error", pattern, who, resp.StatusCode, body, status, code)
	}
}
