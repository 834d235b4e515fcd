package cli

import (
	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/termsafe"

	"fmt"
	"io"
	"strings"
)

// printPlan shows a plan: each change but the unchanged ones, then the
// container steps it implies per host, then the counts.
//
//	Plan for default/demo:
//	  + egg/kv
//	  ~ egg/web (env)
//	On the hosts:
//	  local: start kv: 1 replica; roll web: 3 replicas, start-first, 1 at a time
//	1 to create, 1 to update, 0 to delete, 3 unchanged.
func printPlan(w io.Writer, project string, p api.Plan) {
	counts := map[string]int{}
	fmt.Fprintf(w, "Plan for %s:\n", project)
	for _, c := range p.Changes {
		counts[c.Action]++
		if c.Action == "=" {
			continue
		}
		line := "  " + c.Action + " " + c.Key
		if len(c.Changed) > 0 {
			line += " (" + strings.Join(c.Changed, ", ") + ")"
		}
		if len(c.Unknown) > 0 {
			line += " [known after apply: " + strings.Join(c.Unknown, ", ") + "]"
		}
		fmt.Fprintln(w, line)
	}
	if len(p.Changes) == counts["="] {
		fmt.Fprintln(w, "  (nothing to change)")
	}
	if len(p.Notes) > 0 {
		fmt.Fprintln(w, "Note:")
		for _, n := range p.Notes {
			fmt.Fprintf(w, "  %s\n", termsafe.Line(n))
		}
	}
	var steps []api.HostSteps
	for _, h := range p.Hosts {
		if len(h.Steps) > 0 {
			steps = append(steps, h)
		}
	}
	if len(steps) > 0 {
		fmt.Fprintln(w, "On the hosts:")
		for _, h := range steps {
			name := h.Name
			if name == "" {
				name = h.Host
			}
			fmt.Fprintf(w, "  %s:\n", name)
			for _, s := range h.Steps {
				fmt.Fprintf(w, "    %s\n", s)
			}
		}
	}
	fmt.Fprintf(w, "%d to create, %d to update, %d to delete, %d unchanged.\n", counts["+"], counts["~"], counts["-"], counts["="])
}
