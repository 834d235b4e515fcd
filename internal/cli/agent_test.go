package cli

import (
	"maps"
	"strings"
	"testing"
)

func TestAgentFirstStartNeedsServerAndJoinToken(t *testing.T) {
	code, _, errOut := run(t, "agent", "--data-dir", t.TempDir())
	if code != 1 || !strings.Contains(errOut, "--server and --join") {
		t.Errorf("exit %d, stderr %q: want 1 and a hint at --server and --join", code, errOut)
	}
}

func TestAgentRefusesABadLabel(t *testing.T) {
	code, _, errOut := run(t, "agent", "--data-dir", t.TempDir(), "--label", "novalue")
	if code != 1 || !strings.Contains(errOut, "KEY=VALUE") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

func TestParseLabels(t *testing.T) {
	got, err := parseLabels([]string{"a=1", "b=x=y", "c="})
	want := map[string]string{"a": "1", "b": "x=y", "c": ""}
	if err != nil || !maps.Equal(got, want) {
		t.Errorf("parseLabels = %v, %v; want %v", got, err, want)
	}
	if _, err := parseLabels([]string{"=v"}); err == nil {
		t.Error("a label without a key was accepted")
	}
}
