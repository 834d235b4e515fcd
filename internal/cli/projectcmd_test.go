package cli

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/pki"
)

func adminToken() string { return pki.NewToken(pki.KindAdmin, strings.Repeat("cd", 32)).String() }

func TestErrorsAUserCausesAreOneLineWithWhatToDo(t *testing.T) {
	refusing := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close() // nothing listens there now
		return "http://" + addr
	}
	unauthorized := func(t *testing.T) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeTestJSON(w, http.StatusUnauthorized, map[string]string{"error": "unauthorized", "message": "missing or invalid token"})
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	tests := []struct {
		name   string
		server func(t *testing.T) string
		args   []string
		want   string
	}{
		{"no server configured", nil, []string{"status"}, "no server (--server or HATCH_SERVER)"},
		{"nothing listening", refusing, []string{"status"}, "no control plane answers at"},
		{"a wrong token", unauthorized, []string{"status", "demo"}, "refused the token"},
		{"a missing project file", nil, []string{"apply", "-f", "nope.yaml"}, "nope.yaml"},
		{"an egg without its project", nil, []string{"rollout", "restart", "web"}, "name the egg as PROJECT/EGG"},
		{"a bad namespace", nil, []string{"destroy", "demo", "-n", "Prod"}, `namespace "Prod"`},
		{"a bad project name", nil, []string{"destroy", "Demo"}, `project "Demo"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			isolate(t)
			if tt.server != nil {
				t.Setenv(client.EnvServer, tt.server(t))
				t.Setenv(client.EnvToken, adminToken())
			}
			code, stdout, stderr := run(t, tt.args...)
			if code != 1 {
				t.Fatalf("exit code %d, want 1 (stdout %q, stderr %q)", code, stdout, stderr)
			}
			if !strings.HasPrefix(stderr, "hatch: ") || strings.Count(strings.TrimSpace(stderr), "\n") > 1 || !strings.Contains(stderr, tt.want) {
				t.Fatalf("stderr = %q, want one or two hatch: lines saying %q", stderr, tt.want)
			}
		})
	}
}

func TestApplyWithoutATerminalNeedsYes(t *testing.T) {
	isolate(t)
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	f, c := newFakeAPI(t)
	t.Setenv(client.EnvServer, c.Server())
	t.Setenv(client.EnvToken, adminToken())
	if err := os.WriteFile(filepath.Join(dir, "hatch.yaml"), []byte("project: demo\neggs:\n  web: {image: nginx:1.27}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := run(t, "apply")
	if code != 1 || !strings.Contains(stderr, "run again with --yes") || !strings.Contains(stdout, "Plan for default/demo") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if len(f.applied) != 0 {
		t.Fatal("applied without --yes")
	}
}

func TestRolloutRestartRollsTheEggAndFollowsIt(t *testing.T) {
	isolate(t)
	f, c := newFakeAPI(t)
	f.statuses = readyStatuses("web")
	t.Setenv(client.EnvServer, c.Server())
	t.Setenv(client.EnvToken, adminToken())
	code, stdout, stderr := run(t, "rollout", "restart", "demo/web")
	if code != 0 || len(f.restarted) != 1 || f.restarted[0] != "web" {
		t.Fatalf("exit %d, restarted %v\nstdout:\n%s\nstderr:\n%s", code, f.restarted, stdout, stderr)
	}
	if !strings.Contains(stdout, "default/demo/web rolls again (revision 2)") || !strings.Contains(stdout, "is ready: web 1/1") {
		t.Fatalf("stdout:\n%s", stdout)
	}
}

func TestPlanTakesAComposeFile(t *testing.T) {
	isolate(t)
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	f, c := newFakeAPI(t)
	t.Setenv(client.EnvServer, c.Server())
	t.Setenv(client.EnvToken, adminToken())
	compose := "name: shop\nservices:\n  web:\n    image: nginx:1.27\n    deploy: {replicas: 2}\n"
	if err := os.WriteFile(filepath.Join(dir, "compose.yaml"), []byte(compose), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := run(t, "plan", "-f", "compose.yaml", "-n", "staging")
	if code != 0 || !strings.Contains(stdout, "Plan for staging/shop:") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if len(f.plans) != 1 || !slices.ContainsFunc(f.plans[0].Resources, func(r api.DesiredResource) bool {
		return r.Type == "egg" && r.Name == "web" && r.Inputs["replicas"] == float64(2)
	}) {
		t.Fatalf("plan request %+v, want egg/web with 2 replicas", f.plans)
	}
	if len(f.applied) != 0 {
		t.Fatal("plan applied something")
	}
}

func TestAWrongTokenSaysOnceWhereTheAdminTokenIs(t *testing.T) {
	isolate(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// What the server answers a token it does not know.
		writeTestJSON(w, http.StatusUnauthorized, map[string]string{"error": "unauthorized",
			"message": "missing or invalid token: send Authorization: Bearer <token> (the admin token is in the server's data dir)"})
	}))
	t.Cleanup(srv.Close)
	t.Setenv(client.EnvServer, srv.URL)
	t.Setenv(client.EnvToken, adminToken())
	code, _, stderr := run(t, "status", "demo")
	if code != 1 || strings.Count(stderr, "admin token") != 1 || strings.Count(stderr, "data") != 1 || !strings.Contains(stderr, "<data-dir>/admin-token") {
		t.Fatalf("exit %d, stderr %q: want the admin token's place said once", code, stderr)
	}
}
