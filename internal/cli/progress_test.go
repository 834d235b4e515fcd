package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestProgressLineFillsTheBarInProportion(t *testing.T) {
	tests := []struct {
		name   string
		p      eggProgress
		filled int
	}{
		{"none healthy", eggProgress{Name: "web", Healthy: 0, Desired: 3, State: rolloutProgressing}, 0},
		{"two of three", eggProgress{Name: "web", Healthy: 2, Desired: 3, State: rolloutProgressing}, 13},
		{"all", eggProgress{Name: "web", Healthy: 3, Desired: 3, State: rolloutDone}, barWidth},
		{"more than desired while surging", eggProgress{Name: "web", Healthy: 4, Desired: 3, State: rolloutProgressing}, barWidth},
		{"cold egg is complete", eggProgress{Name: "web", Healthy: 0, Desired: 0, State: rolloutDone}, barWidth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line := progressLine(tt.p, 5)
			if got := strings.Count(line, "█"); got != tt.filled {
				t.Fatalf("%q has %d filled cells, want %d", line, got, tt.filled)
			}
			if got := strings.Count(line, "█") + strings.Count(line, "·"); got != barWidth {
				t.Fatalf("%q has a bar of %d cells, want %d", line, got, barWidth)
			}
		})
	}
}

func TestProgressLineAlignsNamesAndShowsTheDetail(t *testing.T) {
	a := progressLine(eggProgress{Name: "kv", Healthy: 1, Desired: 1, State: rolloutDone}, 3)
	b := progressLine(eggProgress{Name: "web", Healthy: 1, Desired: 3, State: rolloutFailed, Detail: "health check failed"}, 3)
	if strings.Index(a, "[") != strings.Index(b, "[") {
		t.Fatalf("bars not aligned:\n%s\n%s", a, b)
	}
	if !strings.HasSuffix(b, "1/3 failed  health check failed") {
		t.Fatalf("line = %q", b)
	}
}

func TestPlainProgressPrintsOnlyChanges(t *testing.T) {
	var out bytes.Buffer
	v := newProgressView(&out, false)
	web := eggProgress{Name: "web", Healthy: 0, Desired: 3, State: rolloutProgressing}
	kv := eggProgress{Name: "kv", Healthy: 1, Desired: 1, State: rolloutDone}
	v.Show([]eggProgress{web, kv})
	v.Show([]eggProgress{web, kv})
	web.Healthy = 1
	v.Show([]eggProgress{web, kv})
	want := "web: 0/3 healthy at the new spec, rolling\n" +
		"kv: 1/1 healthy at the new spec, done\n" +
		"web: 1/3 healthy at the new spec, rolling\n"
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
	if strings.Contains(out.String(), "\x1b") {
		t.Fatal("plain output holds escape sequences")
	}
}

func TestTerminalProgressRedrawsItsBlockInPlace(t *testing.T) {
	var out bytes.Buffer
	v := newProgressView(&out, true)
	eggs := []eggProgress{{Name: "web", Desired: 3, State: rolloutProgressing}, {Name: "kv", Desired: 1, State: rolloutProgressing}}
	v.Show(eggs)
	if strings.Contains(out.String(), "\x1b[2A") {
		t.Fatal("the first frame moved the cursor up")
	}
	out.Reset()
	v.Show(eggs)
	if !strings.HasPrefix(out.String(), "\x1b[2A") || strings.Count(out.String(), "\x1b[2K") != 2 {
		t.Fatalf("second frame = %q, want the cursor up two lines and both lines cleared", out.String())
	}
	out.Reset()
	v.Print("resource egg/web updated")
	if out.String() != "\x1b[2A\x1b[Jresource egg/web updated\n" {
		t.Fatalf("Print = %q, want the block cleared and the line printed", out.String())
	}
	out.Reset()
	v.Show(eggs)
	if !strings.HasPrefix(out.String(), "\x1b[2K") {
		t.Fatalf("after Print the block is drawn afresh below the line, got %q", out.String())
	}
}

func TestConfirmTakesOnlyYes(t *testing.T) {
	for answer, want := range map[string]bool{"y\n": true, "YES\n": true, " yes \n": true, "n\n": false, "\n": false, "": false, "sure\n": false} {
		var out bytes.Buffer
		got, err := confirm(strings.NewReader(answer), &out, "Apply?")
		if err != nil || got != want {
			t.Errorf("confirm(%q) = %v, %v; want %v", answer, got, err, want)
		}
		if !strings.HasPrefix(out.String(), "Apply? [y/N] ") {
			t.Errorf("question printed as %q", out.String())
		}
	}
}
