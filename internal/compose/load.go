package compose

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v3"

	"github.com/hatchery/hatchery/internal/spec"
)

// Options are what the loader needs from the outside world.
type Options struct {
	// Environ is the environment Compose interpolates from, as KEY=value
	// (os.Environ() in the CLI). It also holds COMPOSE_PROJECT_NAME,
	// COMPOSE_PROFILES and COMPOSE_DISABLE_ENV_FILE, read as Compose reads
	// them. The .env file beside the first Compose file adds the variables
	// Environ lacks.
	Environ []string
	// Profiles are the profiles to enable; none means COMPOSE_PROFILES.
	Profiles []string
	// Strict turns every warning into an error: nothing of the file may be
	// ignored or approximated.
	Strict bool
}

// Project is a Compose project mapped to Hatchery: the spec.Project, and the
// way from its lines (those of the converted hatch.yaml) back to the Compose
// files, for the checks made after loading.
type Project struct {
	*spec.Project
	move func(spec.Diagnostic) spec.Diagnostic
}

// CheckSources is spec.Project's CheckSources (build contexts, secrets'
// files and variables), with each problem at the line of the Compose setting
// it is about.
func (p *Project) CheckSources(env spec.Environment) []spec.Diagnostic {
	problems := p.Project.CheckSources(env)
	for i, d := range problems {
		problems[i] = p.move(d)
	}
	sortDiagnostics(problems)
	return problems
}

// Load reads one or more Compose files, merged in order as `docker compose
// -f a -f b` merges them, and maps the result to a checked Project.
//
// Loading is compose-go's (interpolation, .env, env_file, profiles, extends,
// include, merging, the project name). The mapping builds a spec.Project,
// writes it as hatch.yaml with spec.Marshal and parses that text with
// spec.Parse, so that a Compose project gets every check a hatch.yaml gets
// and maps to exactly the resources of the hatch.yaml `hatch convert` prints.
//
// A Compose file that compose-go refuses gives its error, wrapped with the
// files' names; one whose YAML is refused for a ${VAR} unquoted inside
// {...} or [...] gives instead an *spec.Error at that line showing the
// quoted form, as a hatch.yaml does. Problems of the mapping, and of the converted project, are
// an *spec.Error listing every one at its line of a Compose file (errors
// found in the converted project point at the service and setting they come
// from); warnings are in the Project, or in the *spec.Error with the errors.
func Load(ctx context.Context, files []string, opts Options) (*Project, error) {
	if len(files) == 0 {
		return nil, errors.New("load compose: no file given")
	}
	cp, findings, err := loadCompose(ctx, files, opts)
	if err != nil {
		if d, ok := flowReferenceError(files); ok {
			return nil, &spec.Error{Errors: []spec.Diagnostic{d}}
		}
		return nil, &loadError{files, err}
	}
	return fromCompose(cp, findings, files, opts)
}

// fromCompose is Load's own part, after compose-go's: the mapping of the
// loaded project, and the parse of the hatch.yaml it converts to.
func fromCompose(cp *types.Project, findings []loader.UnsupportedAttribute, files []string, opts Options) (*Project, error) {
	contents := make([][]byte, len(files))
	for i, f := range files {
		contents[i], _ = os.ReadFile(f) // compose-go read it already; the lines are only a help
	}
	m := newMapper(cp, newLocator(files, contents))
	m.unsupportedWarnings(findings)
	p := m.project(files[0])
	// The mapping is done with compose-go's project, as large as the files:
	// the returned Project keeps m (its mover does) but should not keep that.
	m.cp = nil
	if len(m.errors) > 0 {
		return nil, m.result()
	}
	parsed, move, err := m.convert(p)
	if err != nil {
		// Not compose-go's refusal (a loadError): the hatch.yaml this
		// package wrote does not load, which is a bug of the mapping.
		return nil, fmt.Errorf("load %s: convert to hatch.yaml: %w", strings.Join(files, ", "), err)
	}
	if opts.Strict {
		m.errors = append(m.errors, m.warnings...)
		m.warnings = nil
	}
	if len(m.errors) > 0 {
		return nil, m.result()
	}
	sortDiagnostics(m.warnings)
	parsed.Warnings = m.warnings
	return &Project{Project: parsed, move: move}, nil
}

// loadCompose is compose-go's part: the files loaded, merged and
// interpolated, and the attributes of them the mapping does not read.
//
// It is most of Load's time (for 10,000 services, 7 to 9 times this
// package's own part; see BenchmarkLoadVersusHatchYAML), and compose-go's
// options to skip steps do not make it cheap without changing what a file
// means: interpolation also casts quoted values ("3", "true") to the types
// the rest of compose-go expects, which without it fails or even panics
// (ulimits); validation, normalisation, defaults and the consistency check
// give errors and settings the mapping relies on; resolving paths ourselves
// would redo compose-go's rules (~, env_file, label_file, build contexts).
// Even with all of them skipped, its part stays above twice the loading of
// an equivalent hatch.yaml.
func loadCompose(ctx context.Context, files []string, opts Options) (*types.Project, []loader.UnsupportedAttribute, error) {
	var findings []loader.UnsupportedAttribute
	po, err := cli.NewProjectOptions(files,
		cli.WithEnv(opts.Environ),
		withDotEnv(filepath.Dir(files[0])),
		cli.WithDefaultProfiles(opts.Profiles...),
		cli.WithLoadOptions(
			// Environments are resolved per service below, so that an error
			// (a missing env_file) names its service.
			func(o *loader.Options) { o.SkipResolveEnvironment = true },
			loader.WithSupportedAttributes(supported, func(f []loader.UnsupportedAttribute) { findings = f }),
		),
	)
	if err != nil {
		return nil, nil, err
	}
	cp, err := po.LoadProject(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := resolveEnvironments(cp); err != nil {
		return nil, nil, err
	}
	return cp, findings, nil
}

// convert writes the mapped project as hatch.yaml and parses it, taking the
// diagnostics of that parse as the mapping's own. It returns the parsed
// project, or nil if it has errors, and the function that moves a later
// diagnostic of it to the Compose files.
func (m *mapper) convert(p *spec.Project) (*spec.Project, func(spec.Diagnostic) spec.Diagnostic, error) {
	converted, err := spec.Marshal(p)
	if err != nil {
		return nil, nil, err
	}
	move := m.mover(converted)
	parsed, err := spec.Parse(converted, p.File, spec.Options{})
	var perr *spec.Error
	switch {
	case errors.As(err, &perr):
		m.adopt(move, perr.Errors, perr.Warnings)
	case err != nil:
		return nil, nil, err
	default:
		m.adopt(move, nil, parsed.Warnings)
	}
	return parsed, move, nil
}

// flowReferenceError explains why compose-go refused the files when the
// reason is the first of them that is not valid YAML, and the reason there is
// a ${VAR} (or $${output}) written unquoted inside a flow collection, the
// trap spec.ExplainFlowReference explains: compose-go's own message for it is
// the parser's "did not find expected ',' or '}'", with a line counted from
// 0. compose-go reads the files in order, so a later file is never the one it
// refused when an earlier one is not YAML.
func flowReferenceError(files []string) (spec.Diagnostic, bool) {
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return spec.Diagnostic{}, false
		}
		var doc yaml.Node
		if yaml.Unmarshal(data, &doc) == nil {
			continue
		}
		line, hint, ok := spec.ExplainFlowReference(data)
		if !ok {
			return spec.Diagnostic{}, false
		}
		return spec.Diagnostic{File: f, Line: line, Message: "not valid YAML: " + hint}, true
	}
	return spec.Diagnostic{}, false
}

// loadError is an error of compose-go's, on one line (some of its messages
// span several), after the files it is about.
type loadError struct {
	files []string
	err   error
}

func (e *loadError) Error() string {
	lines := strings.FieldsFunc(e.err.Error(), func(r rune) bool { return r == '\n' })
	return fmt.Sprintf("load %s: %s", strings.Join(e.files, ", "), strings.Join(lines, " "))
}

func (e *loadError) Unwrap() error { return e.err }

// withDotEnv reads the .env file of the project's directory, as Compose
// does unless COMPOSE_DISABLE_ENV_FILE is true; the environment wins over it.
func withDotEnv(dir string) cli.ProjectOptionsFn {
	return func(o *cli.ProjectOptions) error {
		if off, _ := strconv.ParseBool(o.Environment["COMPOSE_DISABLE_ENV_FILE"]); off {
			return nil
		}
		path := filepath.Join(dir, ".env")
		if info, err := os.Stat(path); err != nil || info.IsDir() {
			return nil
		}
		o.EnvFiles = []string{path}
		return cli.WithDotEnv(o)
	}
}

// resolveEnvironments computes each service's environment from its
// env_file and environment. compose-go's error does not say which service's
// env_file it is about, so after one it tries the services one at a time, in
// order, to name the first that fails; a project without errors is resolved
// in one pass (one at a time, each copies the project's environment).
func resolveEnvironments(cp *types.Project) error {
	resolved, err := cp.WithServicesEnvironmentResolved(true)
	if err == nil {
		cp.Services = resolved.Services
		return nil
	}
	for _, name := range sortedKeys(cp.Services) {
		one := types.Project{Environment: cp.Environment, Services: types.Services{name: cp.Services[name]}}
		if _, err := one.WithServicesEnvironmentResolved(true); err != nil {
			return fmt.Errorf("service %q env_file: %w", name, err)
		}
	}
	return err
}

// composeFileName matches the names Compose looks for, and their variants
// (compose.prod.yaml, docker-compose.override.yml).
var composeFileName = regexp.MustCompile(`^(docker-)?compose([.-][^/]*)?\.ya?ml$`)

// IsComposeFile reports whether a project file is a Compose file rather than
// a hatch.yaml: by its name (compose.yaml, docker-compose.yml...), else by
// its content (a top-level services: and no eggs:). A file that cannot be
// read is not one, so that the hatch.yaml loader reports the problem.
func IsComposeFile(path string) bool {
	base := filepath.Base(path)
	if composeFileName.MatchString(base) {
		return true
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var top map[string]yaml.Node
	if yaml.Unmarshal(data, &top) != nil {
		return false
	}
	_, services := top["services"]
	_, eggs := top["eggs"]
	return services && !eggs
}
