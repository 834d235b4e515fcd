package graph

import (
	"fmt"
	"strings"

	"github.com/hatchery/hatchery/internal/resource"
)

// Text renders the graph for a terminal: one resource per line in dependency
// order (parents first, as the reconciler walks it), each followed by the
// resources it needs, with the condition when it is more than "created":
//
//	network/default
//	egg/db        <- network/default, volume/pgdata
//	egg/web       <- egg/db (healthy), network/default
func (g *Graph) Text() string {
	width := 0
	for _, key := range g.order {
		if len(g.deps[key]) > 0 {
			width = max(width, len(key))
		}
	}
	var b strings.Builder
	for _, key := range g.order {
		deps := g.deps[key]
		if len(deps) == 0 {
			b.WriteString(key + "\n")
			continue
		}
		parents := make([]string, len(deps))
		for i, d := range deps {
			parents[i] = d.Parent
			if d.Condition != resource.ConditionCreated {
				parents[i] += " (" + string(d.Condition) + ")"
			}
		}
		fmt.Fprintf(&b, "%-*s  <- %s\n", width, key, strings.Join(parents, ", "))
	}
	return b.String()
}

// DOT renders the graph in Graphviz's language, titled name: an arrow runs
// from each parent to the resources that need it, labelled with its condition
// when it is more than "created", and each type of resource has its shape.
func (g *Graph) DOT(name string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %s {\n", dotID(name))
	b.WriteString("  rankdir=LR;\n")
	b.WriteString("  node [fontname=\"Helvetica\", fontsize=11];\n")
	b.WriteString("  edge [fontname=\"Helvetica\", fontsize=9];\n")
	for _, key := range g.order {
		fmt.Fprintf(&b, "  %s [shape=%s];\n", dotID(key), shapeOf(g.nodes[key].Type))
	}
	for _, key := range g.order {
		for _, d := range g.deps[key] {
			attrs := ""
			if d.Condition != resource.ConditionCreated {
				attrs = fmt.Sprintf(" [label=%s]", dotID(string(d.Condition)))
			}
			fmt.Fprintf(&b, "  %s -> %s%s;\n", dotID(d.Parent), dotID(d.Child), attrs)
		}
	}
	b.WriteString("}\n")
	return b.String()
}

// shapeOf gives each resource type a shape, so the kinds read at a glance.
func shapeOf(typ resource.Kind) string {
	switch typ {
	case resource.Egg:
		return "box"
	case resource.Volume:
		return "cylinder"
	case resource.Network:
		return "ellipse"
	case resource.Secret:
		return "note"
	case resource.Route:
		return "cds"
	}
	return "plaintext"
}

// dotID quotes a string as a DOT identifier.
func dotID(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}
