package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/spec"
)

func newValidateCmd() *cobra.Command {
	var pf projectFiles
	cmd := &cobra.Command{
		Use:   "validate -f FILE [-f FILE...] [--strict]",
		Short: "Check a project file and report every problem with its line",
		Long: "Check a project file as apply would, without deploying anything: every error is\n" +
			"printed as file:line: message, and the exit code is 1 if there is one. Warnings\n" +
			"are printed too, but do not fail the check unless --strict is given. -f also takes\n" +
			"a compose.yaml, and several -f merge Compose files as docker compose does.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := pf.load(cmd)
			if err != nil {
				return err
			}
			problems := pf.checkSources(p)
			if len(problems) > 0 {
				printDiagnostics(cmd.ErrOrStderr(), "", problems)
				return &exitError{code: 1}
			}
			resources, _ := p.Resources()
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (%d resources)\n", &pf, len(resources))
			return err
		},
	}
	pf.register(cmd, "hatch.yaml", true)
	return cmd
}

// loadProject loads a project file with hatch's environment, printing its
// warnings to w. A file with errors prints them all, one per line, and gives
// an exit code of 1 with nothing more to say.
func loadProject(w io.Writer, file string) (*spec.Project, error) {
	p, err := spec.Load(file, spec.Options{LookupEnv: os.LookupEnv})
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
	return p, nil
}

// printDiagnostics prints "file:line: [prefix]message" lines, the form
// compilers use, so that editors link each to its line.
func printDiagnostics(w io.Writer, prefix string, ds []spec.Diagnostic) {
	for _, d := range ds {
		fmt.Fprintf(w, "%s:%d: %s%s\n", d.File, d.Line, prefix, d.Message)
	}
}
