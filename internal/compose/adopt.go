package compose

import (
	"sort"

	"go.yaml.in/yaml/v3"

	"github.com/hatchery/hatchery/internal/spec"
)

// The converted hatch.yaml is parsed by spec.Parse, whose diagnostics point
// at lines of that text, which the user never sees. adopt moves each to the
// Compose setting its line was made from: the line of an egg's field leads
// to the service's matching setting, the line of a volume to the volume.

// composeFields maps an egg's field to the Compose setting it comes from.
var composeFields = map[string][]string{
	"replicas":     {"deploy", "replicas"},
	"port":         {"ports"},
	"env":          {"environment"},
	"health":       {"healthcheck"},
	"routes":       {"x-hatch", "routes"},
	"aliases":      {"networks"},
	"rollout":      {"deploy", "update_config"},
	"resources":    {"deploy", "resources", "limits"},
	"stop_timeout": {"stop_grace_period"},
	"placement":    {"deploy", "placement"},
	"schedule":     {"x-hatch", "schedule"},
}

// anchor ties a line of the converted text to a Compose setting.
type anchor struct {
	line int
	path []string
}

// adopt takes the diagnostics of the converted project as the mapping's
// own, moved to the Compose files.
func (m *mapper) adopt(move func(spec.Diagnostic) spec.Diagnostic, errs, warnings []spec.Diagnostic) {
	for _, d := range errs {
		m.errors = append(m.errors, move(d))
	}
	for _, d := range warnings {
		m.warnings = append(m.warnings, move(d))
	}
}

// mover returns the function that moves a diagnostic of the converted
// project to the Compose setting its line comes from. The converted text's
// lines are read at the first diagnostic: a project without any pays nothing.
func (m *mapper) mover(converted []byte) func(spec.Diagnostic) spec.Diagnostic {
	var anchors []anchor
	read := false
	return func(d spec.Diagnostic) spec.Diagnostic {
		if !read {
			anchors, read = m.anchors(converted), true
		}
		path := []string{}
		i := sort.Search(len(anchors), func(i int) bool { return anchors[i].line > d.Line })
		if i > 0 {
			path = anchors[i-1].path
		}
		d.File, d.Line = m.loc.find(path...)
		return d
	}
}

// anchors lists the lines of the converted text where a section entry or an
// egg's field starts, with the Compose setting each comes from, by line.
func (m *mapper) anchors(converted []byte) []anchor {
	var doc yaml.Node
	if yaml.Unmarshal(converted, &doc) != nil || len(doc.Content) == 0 {
		return nil
	}
	root := doc.Content[0]
	sections := map[string]struct {
		compose string
		names   nameMap
	}{
		"eggs":     {"services", m.enc.services},
		"volumes":  {"volumes", m.enc.volumes},
		"networks": {"networks", m.enc.networks},
		"secrets":  {"secrets", m.enc.secrets},
	}
	var out []anchor
	for i := 0; i+1 < len(root.Content); i += 2 {
		key, value := root.Content[i], root.Content[i+1]
		section, ok := sections[key.Value]
		if !ok {
			out = append(out, anchor{key.Line, []string{"name"}})
			continue
		}
		out = append(out, anchor{key.Line, []string{section.compose}})
		for j := 0; j+1 < len(value.Content); j += 2 {
			entry := value.Content[j]
			name := section.names.from[entry.Value]
			if name == "" {
				name = entry.Value
			}
			base := []string{section.compose, name}
			out = append(out, anchor{entry.Line, base})
			if value.Content[j+1].Kind != yaml.MappingNode {
				continue
			}
			if key.Value == "volumes" {
				out = append(out, volumeAnchors(base, value.Content[j+1])...)
				continue
			}
			if key.Value != "eggs" {
				continue
			}
			fields := value.Content[j+1].Content
			for k := 0; k+1 < len(fields); k += 2 {
				field := fields[k].Value
				path, ok := composeFields[field]
				if !ok {
					path = []string{field}
				}
				out = append(out, anchor{fields[k].Line, append(append([]string{}, base...), path...)})
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].line < out[j].line })
	return out
}

// volumeAnchors ties a volume's backup block, and each of its fields, to
// the volume's x-hatch.backup.
func volumeAnchors(base []string, volume *yaml.Node) []anchor {
	var out []anchor
	for k := 0; k+1 < len(volume.Content); k += 2 {
		if volume.Content[k].Value != "backup" {
			continue
		}
		at := append(append([]string{}, base...), "x-hatch", "backup")
		out = append(out, anchor{volume.Content[k].Line, at})
		fields := volume.Content[k+1]
		for f := 0; f+1 < len(fields.Content); f += 2 {
			out = append(out, anchor{fields.Content[f].Line, append(append([]string{}, at...), fields.Content[f].Value)})
		}
	}
	return out
}
