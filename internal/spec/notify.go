package spec

import (
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/hatchery/hatchery/internal/resource/inputs"
)

// notifyExample is what an error about notify: shows the user to write.
const notifyExample = `[https://hooks.example.com/hatch, {url: "${env.SLACK_WEBHOOK}", format: slack}]`

// notify reads the project's notify: list, each entry a URL (a JSON
// webhook) or {url: URL, format: json|slack}; ${env.*} is substituted, so a
// URL holding a token need not be in the file. Each URL is checked
// (inputs.CheckNotifyTarget) at its line. The format is held as "" for
// json, so that equal settings give equal targets.
func (d *decoder) notify(n *yaml.Node) []inputs.NotifyTarget {
	items, ok := d.list(n, "notify", notifyExample)
	if !ok {
		return nil
	}
	out := []inputs.NotifyTarget{}
	for i, item := range items {
		what := fmt.Sprintf("notify[%d]", i)
		var t inputs.NotifyTarget
		if resolve(item).Kind == yaml.MappingNode {
			for _, g := range d.fields(item, what, "url", "format") {
				switch g.Key {
				case "url":
					t.URL, _ = d.plain(g.Value, what+" url")
				case "format":
					t.Format, _ = d.plain(g.Value, what+" format")
				}
			}
			if t.URL == "" {
				d.errorf(resolve(item).Line, "%s needs url:, for example %s", what, notifyExample)
				continue
			}
		} else if t.URL, ok = d.plain(item, what); !ok {
			continue
		}
		if t.Format == inputs.NotifyJSON {
			t.Format = ""
		}
		if err := inputs.CheckNotifyTarget(t); err != nil {
			d.errorf(resolve(item).Line, "%s %v", what, err)
			continue
		}
		out = append(out, t)
	}
	return out
}

// notifyNode writes the targets back: a plain URL for JSON, a mapping for
// another format.
func notifyNode(targets []inputs.NotifyTarget) *yaml.Node {
	list := sequence(false)
	for _, t := range targets {
		if t.Format == "" {
			list.Content = append(list.Content, str(literal(t.URL)))
			continue
		}
		m := mapping(true)
		add(m, "url", str(literal(t.URL)))
		add(m, "format", str(t.Format))
		list.Content = append(list.Content, m)
	}
	return list
}
