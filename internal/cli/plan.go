package cli

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/spec"
)

func newPlanCmd() *cobra.Command {
	var (
		files projectFiles
		flags projectFlags
	)
	cmd := &cobra.Command{
		Use:   "plan -f FILE",
		Short: "Show what apply would change: + create, ~ update (with the changed fields), - delete",
		Long: "Show what `hatch apply` would change, and the container steps that implies on each\n" +
			"host, without changing anything. Build contexts are uploaded (the server needs them\n" +
			"to tell whether an egg changed), and secret values are read and sent, never shown.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := loadDeployable(cmd, &files)
			if err != nil {
				return err
			}
			return flags.run(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				d := newDeployer(cmd, c)
				req, _, err := d.prepare(ctx, p)
				if err != nil {
					return err
				}
				pl, err := c.Projects().Plan(ctx, flags.namespace, p.Name, req)
				if err != nil {
					return err
				}
				printPlan(cmd.OutOrStdout(), flags.namespace+"/"+p.Name, pl)
				return nil
			})
		},
	}
	files.register(cmd, "hatch.yaml", false)
	flags.register(cmd)
	return cmd
}

// loadDeployable loads the project files and checks what a deploy reads
// from this machine (build contexts, secret files and variables), printing
// every problem with its file and line.
func loadDeployable(cmd *cobra.Command, files *projectFiles) (*spec.Project, error) {
	p, err := files.load(cmd)
	if err != nil {
		return nil, err
	}
	if problems := p.CheckSources(spec.Environment{LookupEnv: os.LookupEnv, Stat: os.Stat}); len(problems) > 0 {
		printDiagnostics(cmd.ErrOrStderr(), "", problems)
		return nil, &exitError{code: 1}
	}
	if p.Name == "" {
		return nil, fmt.Errorf("%s names no project: add `project: NAME` at the top", files)
	}
	return p, nil
}
