package cli

import (
	"errors"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/compose"
	"github.com/hatchery/hatchery/internal/spec"
)

// projectFiles is the -f flag of the commands that read a project: one
// hatch.yaml, or one or more Compose files, merged in order as docker compose
// -f merges them. A Compose file is recognised by its name (compose.yaml,
// docker-compose.yml...) or by its content (services: and no eggs:).
type projectFiles struct {
	files    []string
	profiles []string
	strict   bool
	// composed is the Compose project load loaded, if it did: it checks
	// sources at the Compose files' lines.
	composed *compose.Project
}

// register adds -f, with its default, and --strict when the command offers
// it, to cmd.
func (pf *projectFiles) register(cmd *cobra.Command, defaultFile string, strict bool) {
	cmd.Flags().StringArrayVarP(&pf.files, "file", "f", []string{defaultFile},
		"the project file: a hatch.yaml, or a compose.yaml (repeat -f to merge several Compose files)")
	cmd.Flags().StringArrayVar(&pf.profiles, "profile", nil, "a Compose profile to enable, repeatable (default: COMPOSE_PROFILES)")
	if strict {
		cmd.Flags().BoolVar(&pf.strict, "strict", false, "treat every warning as an error (for a Compose file: every setting Hatchery ignores or approximates)")
	}
}

// String names the files, for messages.
func (pf *projectFiles) String() string { return strings.Join(pf.files, ", ") }

// load loads the project, printing its warnings to cmd's stderr. A project
// with errors prints them all, one per line, and gives an exit code of 1
// with nothing more to say.
func (pf *projectFiles) load(cmd *cobra.Command) (*spec.Project, error) {
	w := cmd.ErrOrStderr()
	if len(pf.files) == 1 && !compose.IsComposeFile(pf.files[0]) {
		p, err := loadProject(w, pf.files[0])
		if err == nil && pf.strict && len(p.Warnings) > 0 {
			return nil, &exitError{code: 1}
		}
		return p, err
	}
	p, err := compose.Load(cmd.Context(), pf.files, compose.Options{Environ: os.Environ(), Profiles: pf.profiles, Strict: pf.strict})
	var problems *spec.Error
	if errors.As(err, &problems) {
		printDiagnostics(w, "", problems.Errors)
		printDiagnostics(w, "warning: ", problems.Warnings)
		return nil, &exitError{code: 1}
	}
	if err != nil {
		return nil, err
	}
	printDiagnostics(w, "warning: ", p.Warnings)
	pf.composed = p
	return p.Project, nil
}

// checkSources checks what apply reads of the project load returned: its
// build contexts and its secrets' files and variables.
func (pf *projectFiles) checkSources(p *spec.Project) []spec.Diagnostic {
	env := spec.Environment{LookupEnv: os.LookupEnv, Stat: os.Stat}
	if pf.composed != nil && pf.composed.Project == p {
		return pf.composed.CheckSources(env)
	}
	return p.CheckSources(env)
}
