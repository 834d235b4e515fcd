package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/hatchery/hatchery/internal/termsafe"
)

// eggProgress is one egg's rollout as the apply and up commands show it.
type eggProgress struct {
	Name string
	// Healthy counts the replicas healthy at the new spec; Desired is the
	// egg's replica count.
	Healthy, Desired int
	State            rolloutState
	// Detail says what is going on: the hosts, or why the rollout failed.
	Detail string
}

type rolloutState string

const (
	rolloutWaiting     rolloutState = "waiting"
	rolloutProgressing rolloutState = "rolling"
	rolloutDone        rolloutState = "done"
	rolloutFailed      rolloutState = "failed"
)

// barWidth is the number of cells of a progress bar.
const barWidth = 20

// progressLine renders one egg: its name padded to nameWidth, a bar of
// healthy over desired, the count and the state.
//
//	web  [█████████████·······]  2/3 rolling  on local
func progressLine(p eggProgress, nameWidth int) string {
	filled := barWidth
	if p.Desired > 0 {
		filled = min(barWidth, max(0, p.Healthy)*barWidth/p.Desired)
	}
	bar := strings.Repeat("█", filled) + strings.Repeat("·", barWidth-filled)
	line := fmt.Sprintf("%-*s [%s] %*d/%d %s", nameWidth, p.Name, bar, countWidth(p.Desired), p.Healthy, p.Desired, p.State)
	if p.Detail != "" {
		line += "  " + termsafe.Line(p.Detail) // a host's words, maybe a container's
	}
	return line
}

func countWidth(n int) int { return len(fmt.Sprint(n)) }

// progressView shows the eggs' progress. On a terminal it redraws its block
// of lines in place; elsewhere it prints a plain line for each egg whose
// progress changed, so a log of the output reads as a history.
type progressView struct {
	out      io.Writer
	terminal bool
	drawn    int                    // lines of the last frame on the terminal
	last     map[string]eggProgress // what the plain output last printed per egg
}

func newProgressView(out io.Writer, terminal bool) *progressView {
	return &progressView{out: out, terminal: terminal, last: map[string]eggProgress{}}
}

// Show draws the eggs' current progress.
func (v *progressView) Show(eggs []eggProgress) {
	width := 0
	for _, e := range eggs {
		width = max(width, len(e.Name))
	}
	if v.terminal {
		var b strings.Builder
		if v.drawn > 0 {
			fmt.Fprintf(&b, "\x1b[%dA", v.drawn) // back to the frame's first line
		}
		for _, e := range eggs {
			b.WriteString("\x1b[2K") // clear the line: the new one may be shorter
			b.WriteString(progressLine(e, width))
			b.WriteByte('\n')
		}
		v.drawn = len(eggs)
		_, _ = io.WriteString(v.out, b.String())
		return
	}
	for _, e := range eggs {
		if prev, ok := v.last[e.Name]; ok && prev == e {
			continue
		}
		v.last[e.Name] = e
		line := fmt.Sprintf("%s: %d/%d healthy at the new spec, %s", e.Name, e.Healthy, e.Desired, e.State)
		if e.Detail != "" {
			line += " (" + termsafe.Line(e.Detail) + ")"
		}
		fmt.Fprintln(v.out, line)
	}
}

// Print writes a line above the progress block on a terminal (the block is
// drawn again below it at the next Show), or as it is elsewhere.
func (v *progressView) Print(line string) {
	if v.terminal && v.drawn > 0 {
		fmt.Fprintf(v.out, "\x1b[%dA\x1b[J", v.drawn) // up, and clear to the end of the screen
		v.drawn = 0
	}
	fmt.Fprintln(v.out, line)
}
