package cli

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
)

func TestHistoryAndRollbackArgumentErrorsSayWhatToDo(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"history"}, "accepts 1 arg"},
		{[]string{"history", "Shop"}, `project "Shop"`},
		{[]string{"history", "shop", "-n", "Prod"}, `namespace "Prod"`},
		{[]string{"rollback"}, "accepts between 1 and 2 arg"},
		{[]string{"rollback", "shop", "x"}, `"x" is not the number of an apply`},
		{[]string{"rollback", "shop", "0"}, `"0" is not the number of an apply`},
		{[]string{"rollback", "shop", "--to", "0"}, "--to 0: give the number of an apply"},
		{[]string{"rollback", "shop", "2", "--to", "3"}, "as an argument or with --to, not both"},
		{[]string{"rollback", "sh/op"}, `project "sh/op"`},
		{[]string{"exec", "shop", "web", "--host", "", "--", "sh"}, "--host: name a host"},
	} {
		code, _, errOut := run(t, c.args...)
		if code != 1 || !strings.Contains(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("hatch %s: exit %d, stderr %q; want 1 and one line saying %q", strings.Join(c.args, " "), code, errOut, c.want)
		}
	}
}

func TestKeepAppliesOutOfRangeStopsTheServerBeforeItMakesAnything(t *testing.T) {
	for _, n := range []string{"0", "1001"} {
		dir := filepath.Join(t.TempDir(), "data")
		code, _, errOut := run(t, "server", "--keep-applies", n, "--data-dir", dir, "--cli-config", "-")
		if code != 1 || !strings.Contains(errOut, "--keep-applies: "+n+" is not between 1 and 1000") {
			t.Errorf("hatch server --keep-applies %s: exit %d, stderr %q", n, code, errOut)
		}
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("--keep-applies %s: the data dir was made (%v)", n, err)
		}
	}
}

func TestRollbackTargetTakesTheArgumentOrTo(t *testing.T) {
	for _, c := range []struct {
		args  []string
		to    int64
		toSet bool
		want  int64
	}{
		{nil, 0, false, 0},
		{[]string{"4"}, 0, false, 4},
		{nil, 3, true, 3},
		{[]string{"3"}, 3, true, 3},
	} {
		if got, err := rollbackTarget(c.args, c.to, c.toSet); err != nil || got != c.want {
			t.Errorf("rollbackTarget(%v, %d, %v) = %d, %v; want %d", c.args, c.to, c.toSet, got, err, c.want)
		}
	}
}

func TestHistoryShowsEachApplyOnOneLineWithUserTextEscaped(t *testing.T) {
	at := time.Date(2026, 12, 1, 16, 0, 0, 0, time.Local)
	var b bytes.Buffer
	printHistory(&b, api.ApplyHistory{Namespace: "default", Project: "shop", Keep: 20, Applies: []api.Apply{
		{ID: 3, Started: at, Outcome: "succeeded", Actor: "alice", Summary: "~ egg/web [env]", RollbackOf: 1,
			Digest: "sha256:3f9a0c1b2d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8"},
		{ID: 2, Started: at, Outcome: "failed", Actor: "bob\x1b[2J", Summary: "~ egg/web [image]", Message: "egg/web: \x1b]52;c;aGk=\a"},
		{ID: 1, Started: at, Outcome: "succeeded"},
	}})
	out := b.String()
	want := []string{
		"APPLY  STARTED              BY          OUTCOME    DIGEST        CHANGES",
		"3      2026-12-01 16:00:00  alice       succeeded  3f9a0c1b2d4e  ~ egg/web [env] (rollback to 1)",
		`2      2026-12-01 16:00:00  bob\x1b[2J  failed     -             ~ egg/web [image]; failed: egg/web: \x1b]52;c;aGk=\a`,
		"1      2026-12-01 16:00:00  -           succeeded  -             -",
		"The control plane keeps the last 20 applies of a project.",
	}
	if got := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("printed:\n%s\nwant:\n%s", out, strings.Join(want, "\n"))
	}
	if strings.ContainsRune(out, 0x1b) || strings.ContainsRune(out, 0x07) {
		t.Fatal("a control character reached the output")
	}
}
