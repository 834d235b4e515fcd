package spec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/hatchery/hatchery/internal/resource"
)

// Options are what the loader needs from the outside world.
type Options struct {
	// LookupEnv resolves ${env.NAME} (os.LookupEnv in the CLI). Nil means no
	// variable is set, so only references with a default load.
	LookupEnv func(name string) (string, bool)
}

// Load reads and parses a project file; see Parse.
func Load(path string, opts Options) (*Project, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read project file: %w", err)
	}
	return Parse(data, path, opts)
}

// Parse parses a project file's content. file is the file's path, used in
// messages and as the base of the relative paths the file holds. Parse does
// no I/O: files the project names are checked by CheckSources.
//
// The error, if the file has problems, is an *Error listing every one of
// them by line; warnings are in the Project or, with errors, in the *Error.
func Parse(data []byte, file string, opts Options) (*Project, error) {
	env := opts.LookupEnv
	if env == nil {
		env = func(string) (string, bool) { return "", false }
	}
	d := &decoder{problems: &problems{file: file}, interp: interpolation{env: env}}
	p := &Project{File: file, Dir: filepath.Dir(file)}
	if root := d.document(data); root != nil {
		d.project(root, p)
	}
	d.check(p)
	sortDiagnostics(d.errors)
	sortDiagnostics(d.warnings)
	if len(d.errors) > 0 {
		return nil, &Error{Errors: d.errors, Warnings: d.warnings}
	}
	p.Warnings = d.warnings
	return p, nil
}

// yamlLine finds the line in a YAML syntax error ("yaml: line 3: ...").
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// parserProblems are the errors of the YAML parser (not of its scanner), for
// which the yaml package reports the line of the construct being parsed
// counting from 0, where its scanner errors count from 1.
var parserProblems = []string{
	"did not find expected ',' or ']'", "did not find expected ',' or '}'",
	"did not find expected '-' indicator", "did not find expected <document start>",
	"did not find expected key", "did not find expected node content",
	"found undefined tag handle", "found incompatible YAML document",
}

// document parses the YAML text and returns its root mapping, or nil after
// reporting why there is none.
func (d *decoder) document(data []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.errorf(1, "the file is empty: a project needs at least project: and eggs:")
			return nil
		}
		msg, line := err.Error(), 1
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = strings.TrimPrefix(msg, m[0])
			if contains(parserProblems, msg) {
				line++
			}
		} else {
			msg = strings.TrimPrefix(msg, "yaml: ")
		}
		if at, hint, ok := ExplainFlowReference(data); ok {
			line, msg = at, hint
		}
		d.errorf(line, "not valid YAML: %s", msg)
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		d.errorf(extra.Line, "a project file holds one YAML document: remove this \"---\" and what follows, or put it in another file")
	}
	if len(doc.Content) == 0 {
		d.errorf(1, "the file is empty: a project needs at least project: and eggs:")
		return nil
	}
	return doc.Content[0]
}

// topFields are the sections of a project file.
var topFields = []string{"project", "eggs", "volumes", "networks", "secrets", "registries", "notify"}

// project decodes the root mapping into p.
func (d *decoder) project(root *yaml.Node, p *Project) {
	sections := map[string]field{}
	for _, f := range d.fields(root, "the project file") {
		switch {
		case strings.HasPrefix(f.Key, "x-"):
			// Extension fields, as in Compose: a place for YAML anchors.
		case contains(topFields, f.Key):
			sections[f.Key] = f
		default:
			d.errorf(f.Line, "unknown field %q at the top of the file%s", f.Key, suggestOrList(f.Key, topFields))
		}
	}

	if f, ok := sections["project"]; !ok {
		d.errorf(root.Line, "the file has no project: name: add a line like \"project: shop\"")
	} else if name, ok := d.plain(f.Value, "project"); ok {
		if err := checkName("project", name); err != nil {
			d.errorf(f.Line, "%v", err)
		}
		p.Name = name
	}

	if f, ok := sections["notify"]; ok {
		p.Notify = d.notify(f.Value)
	}

	d.interp.defined = defined{resource.Egg: {}, resource.Volume: {}, resource.Network: {DefaultNetwork: true}, resource.Secret: {}}
	for _, f := range d.fields(sections["volumes"].Value, "volumes") {
		if d.definedKey(f, resource.Volume) {
			p.Volumes = append(p.Volumes, d.volume(f))
		}
	}
	for _, f := range d.fields(sections["networks"].Value, "networks") {
		if d.definedKey(f, resource.Network) {
			p.Networks = append(p.Networks, d.network(f))
		}
	}
	for _, f := range d.fields(sections["secrets"].Value, "secrets") {
		if d.definedKey(f, resource.Secret) {
			p.Secrets = append(p.Secrets, d.secret(f))
		}
	}
	p.Registries = d.registries(sections["registries"].Value)

	eggs, ok := sections["eggs"]
	if !ok || isNull(resolve(eggs.Value)) {
		d.errorf(root.Line, "the file has no eggs: a project needs at least one egg to run")
		return
	}
	// Every egg's name is known before any egg is read, so references may
	// point forward in the file.
	entries := d.fields(eggs.Value, "eggs")
	var named []field
	for _, f := range entries {
		if err := checkName(string(resource.Egg), f.Key); err != nil {
			d.errorf(f.Line, "%v", err)
			continue
		}
		d.interp.defined[resource.Egg][f.Key] = true
		named = append(named, f)
	}
	if len(entries) == 0 && resolve(eggs.Value).Kind == yaml.MappingNode {
		d.errorf(eggs.Line, "eggs is empty: a project needs at least one egg to run")
	}
	for _, f := range named {
		p.Eggs = append(p.Eggs, d.egg(f, p.Dir))
	}
	d.addDefaultNetwork(p)

	sort.Slice(p.Eggs, func(i, j int) bool { return p.Eggs[i].Name < p.Eggs[j].Name })
	sort.Slice(p.Volumes, func(i, j int) bool { return p.Volumes[i].Name < p.Volumes[j].Name })
	sort.Slice(p.Networks, func(i, j int) bool { return p.Networks[i].Name < p.Networks[j].Name })
	sort.Slice(p.Secrets, func(i, j int) bool { return p.Secrets[i].Name < p.Secrets[j].Name })
}

// definedKey checks the name of a volume, network or secret and records it.
func (d *decoder) definedKey(f field, typ resource.Kind) bool {
	if err := checkKey(typ, f.Key); err != nil {
		d.errorf(f.Line, "%v", err)
		return false
	}
	d.interp.defined[typ][f.Key] = true
	return true
}

// addDefaultNetwork adds the project's default network when an egg is on it
// (by listing no network, or "default") and the file does not configure it.
func (d *decoder) addDefaultNetwork(p *Project) {
	for _, n := range p.Networks {
		if n.Name == DefaultNetwork {
			return
		}
	}
	for _, e := range p.Eggs {
		used := contains(e.Networks, DefaultNetwork)
		for _, r := range e.refs {
			used = used || r.Key == "network/"+DefaultNetwork
		}
		if used {
			p.Networks = append(p.Networks, &Network{Name: DefaultNetwork, Labels: map[string]string{}})
			return
		}
	}
}

func (d *decoder) volume(f field) *Volume {
	v := &Volume{Name: f.Key, Line: f.Line, Labels: map[string]string{}}
	what := fmt.Sprintf("volume %q", f.Key)
	for _, g := range d.fields(f.Value, what, "labels", "backup", "failover") {
		switch g.Key {
		case "labels":
			v.Labels = d.labels(g.Value, what+" labels")
		case "backup":
			v.BackupLine = g.Line
			d.backup(v, g)
		case "failover":
			v.FailoverLine = g.Line
			d.failover(v, g)
		}
	}
	d.checkFailover(v)
	return v
}

func (d *decoder) network(f field) *Network {
	n := &Network{Name: f.Key, Line: f.Line, Labels: map[string]string{}}
	what := fmt.Sprintf("network %q", f.Key)
	for _, g := range d.fields(f.Value, what, "internal", "labels") {
		switch g.Key {
		case "internal":
			n.Internal, _ = d.boolean(g.Value, what+" internal")
		case "labels":
			n.Labels = d.labels(g.Value, what+" labels")
		}
	}
	return n
}

func (d *decoder) secret(f field) *Secret {
	s := &Secret{Name: f.Key, Line: f.Line}
	what := fmt.Sprintf("secret %q", f.Key)
	for _, g := range d.fields(f.Value, what, "file", "env") {
		switch g.Key {
		case "file":
			if v, ok := d.plain(g.Value, what+" file"); ok && v != "" {
				s.File = escape(filepath.ToSlash(filepath.Clean(v)))
			}
		case "env":
			if v, ok := d.plain(g.Value, what+" env"); ok {
				if !envName.MatchString(v) {
					d.errorf(g.Line, "%s env: %q is not a variable name", what, v)
				}
				s.Env = v
			}
		}
	}
	if (s.File == "") == (s.Env == "") {
		d.errorf(f.Line, "%s needs exactly one of file: (a path relative to this file) or env: (a variable of hatch's environment)", what)
	}
	return s
}

// labels reads container or object labels; Hatchery's own prefix is refused,
// since the agent trusts those labels to know what it manages.
func (d *decoder) labels(n *yaml.Node, what string) map[string]string {
	out, lines := d.stringMap(n, what, nil)
	for _, k := range keys(out) {
		switch {
		case strings.HasPrefix(k, "io.hatchery."):
			d.errorf(lines[k], "%s: %q uses Hatchery's own prefix io.hatchery., which is reserved: rename the label", what, k)
			delete(out, k)
		case !labelKeyRE.MatchString(k):
			d.errorf(lines[k], "%s: %q is not a label key: use letters, digits, dots, slashes, hyphens and underscores", what, k)
			delete(out, k)
		}
	}
	return out
}
