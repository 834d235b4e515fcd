package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/agent"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/pki"
)

// writeEggProject writes a project of one egg, web, and returns its file.
func writeEggProject(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hatch.yaml")
	if err := os.WriteFile(path, []byte("project: "+name+"\neggs:\n  web:\n    image: registry.local/web:1\n    pull: missing\n    port: 8080\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// joinFakeHost joins a host that reports whatever it is given running
// (fakeHost), with the CLI's admin token, until the test ends.
func joinFakeHost(t *testing.T, server string) {
	t.Helper()
	code, joinToken, errOut := run(t, "token", "create", "--join")
	if code != 0 {
		t.Fatalf("hatch token create --join = %d %s", code, errOut)
	}
	id, err := agent.JoinHost(t.Context(), t.TempDir(), server, strings.TrimSpace(joinToken), "node-1", zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	host := &fakeHost{id: id, wait: time.Second}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); host.run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
}

// A pipeline's deploy token through the real CLI on a loopback server: it
// plans and applies its project (given by HATCH_TOKEN, as a CI job sets it),
// reads its status and events, is refused another project, tokens and hosts,
// is listed with its project, and is refused once revoked.
func TestADeployTokenDeploysItsProjectOnlyThroughTheCLI(t *testing.T) {
	isolate(t)
	srv := startServer(t, "--data-dir", t.TempDir())
	joinFakeHost(t, srv.url)
	shop, other := writeEggProject(t, "shop"), writeEggProject(t, "other")
	if code, out, errOut := run(t, "apply", "-f", other, "--yes"); code != 0 {
		t.Fatalf("the admin's apply of other = %d\n%s\n%s", code, out, errOut)
	}

	code, ci, errOut := run(t, "token", "create", "--deploy", "-n", "default", "shop", "--name", "ci")
	ci = strings.TrimSpace(ci)
	if tok, err := pki.ParseToken(ci); code != 0 || err != nil || tok.Kind != pki.KindDeploy {
		t.Fatalf("hatch token create --deploy shop --name ci = %d %q %s", code, ci, errOut)
	}
	if !strings.Contains(errOut, `deploy token "ci" of default/shop made (no exec)`) || !strings.Contains(errOut, client.EnvToken) {
		t.Fatalf("hatch token create --deploy said %q; want the token's project, exec right and how to use it", errOut)
	}

	// As a CI job runs it: the server and the token from the environment.
	t.Setenv(client.EnvServer, srv.url)
	t.Setenv(client.EnvToken, ci)
	if code, out, errOut := run(t, "plan", "-f", shop); code != 0 || !strings.Contains(out, "web") {
		t.Fatalf("hatch plan of its project with the deploy token = %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := run(t, "apply", "-f", shop, "--yes"); code != 0 {
		t.Fatalf("hatch apply of its project with the deploy token = %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := run(t, "status"); code != 0 || !strings.Contains(out, "shop") || strings.Contains(out, "other") {
		t.Fatalf("hatch status with the deploy token = %d\n%s\n%s; want its project only", code, out, errOut)
	}
	// A second version, then back to the first.
	if err := os.WriteFile(shop, []byte("project: shop\neggs:\n  web:\n    image: registry.local/web:2\n    pull: missing\n    port: 8080\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := run(t, "apply", "-f", shop, "--yes"); code != 0 {
		t.Fatalf("hatch apply of its project's second version with the deploy token = %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := run(t, "rollback", "shop", "--yes"); code != 0 || !strings.Contains(out, "egg/web (image)") {
		t.Fatalf("hatch rollback shop with the deploy token = %d\n%s\n%s; want web's first image back", code, out, errOut)
	}
	if code, out, errOut := run(t, "history", "shop"); code != 0 || !strings.Contains(out, "deploy:ci") {
		t.Fatalf("hatch history shop with the deploy token = %d\n%s\n%s; want its apply recorded as deploy:ci's", code, out, errOut)
	}
	code, out, errOut := run(t, "events")
	if code != 0 || !strings.Contains(out, "default/shop") || strings.Contains(out, "default/other") {
		t.Fatalf("hatch events with the deploy token = %d\n%s\n%s; want its project's events only", code, out, errOut)
	}
	for _, args := range [][]string{
		{"plan", "-f", other},
		{"apply", "-f", other, "--yes"},
		{"plan", "-f", shop, "-n", "staging"},
		{"destroy", "shop", "--yes"},
		{"token", "list"},
		{"token", "create", "--deploy", "shop", "--name", "ci2"},
		{"hosts"},
	} {
		if code, out, errOut := run(t, args...); code == 0 || !strings.Contains(errOut, "may not") {
			t.Errorf("hatch %v with the deploy token = %d\n%s\n%s; want refused", args, code, out, errOut)
		}
	}

	// The admin lists it with its project and exec right, and revokes it.
	t.Setenv(client.EnvServer, "")
	t.Setenv(client.EnvToken, "")
	code, out, errOut = run(t, "token", "list")
	if code != 0 || !strings.Contains(out, "ci     deploy  default/shop  no    active") || strings.Contains(out, ci) {
		t.Fatalf("hatch token list = %d\n%s\n%s; want ci as a deploy token of default/shop without exec", code, out, errOut)
	}
	if code, _, errOut := run(t, "token", "revoke", "--admin", "ci"); code == 0 || !strings.Contains(errOut, "revoke it with `hatch token revoke --deploy ci`") {
		t.Fatalf("hatch token revoke --admin ci = %d %s; want refused, naming --deploy", code, errOut)
	}
	if code, _, errOut := run(t, "token", "revoke", "--deploy", "admin"); code == 0 || !strings.Contains(errOut, `"admin" is an admin token`) {
		t.Fatalf("hatch token revoke --deploy admin = %d %s; want refused as an admin token", code, errOut)
	}
	if code, out, errOut := run(t, "token", "revoke", "--deploy", "ci"); code != 0 || !strings.Contains(out, `deploy token "ci" revoked`) {
		t.Fatalf("hatch token revoke --deploy ci = %d %q %s", code, out, errOut)
	}
	code, _, errOut = run(t, "plan", "-f", shop, "--token", ci)
	if code == 0 || !strings.Contains(errOut, `deploy token "ci" of default/shop was revoked`) {
		t.Fatalf("hatch plan with the revoked deploy token = %d %s; want refused as revoked", code, errOut)
	}
	if strings.Contains(srv.stderr.String(), ci) {
		t.Fatal("the deploy token appears in the server's log")
	}
}

func TestTokenCreateRefusesFlagsThatMakeNoToken(t *testing.T) {
	isolate(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--deploy", "--admin", "--name", "x"}, "which kind"},
		{[]string{"--deploy", "--name", "ci"}, "needs the project"},
		{[]string{"--deploy", "shop"}, "--name"},
		{[]string{"--deploy", "Shop", "--name", "ci"}, `project "Shop"`},
		{[]string{"--deploy", "-n", "a/b", "shop", "--name", "ci"}, `namespace "a/b"`},
		{[]string{"--admin", "--name", "x", "--exec"}, "--exec goes with --deploy"},
		{[]string{"--join", "shop"}, "only --deploy takes one"},
	} {
		code, _, errOut := run(t, append([]string{"token", "create"}, tc.args...)...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("hatch token create %v = %d %q, want an error mentioning %q", tc.args, code, errOut, tc.want)
		}
	}
}
