package cli

import (
	"github.com/hatchery/hatchery/internal/client"

	"context"

	"github.com/spf13/cobra"
)

func newApplyCmd() *cobra.Command {
	var (
		files projectFiles
		flags projectFlags
		opts  deployOptions
	)
	cmd := &cobra.Command{
		Use:   "apply -f FILE [--yes] [--no-wait]",
		Short: "Deploy a project: plan, confirm, apply, then follow the rollouts until done",
		Long: "Deploy a project. The file is checked here first; each build: directory is packed\n" +
			"(honouring its .dockerignore) and uploaded unless the server has it; the plan is\n" +
			"shown and, on a terminal, confirmed (--yes skips the question, and is needed when\n" +
			"there is no terminal). Each resource is printed as it lands, then each egg's\n" +
			"replicas healthy at the new spec, until all are ready (exit 0) or a rollout fails\n" +
			"(exit 1, with the reason and the failing container's last log lines).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := loadDeployable(cmd, &files)
			if err != nil {
				return err
			}
			opts.namespace = flags.namespace
			return flags.run(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				return newDeployer(cmd, c).deploy(ctx, p, opts)
			})
		},
	}
	files.register(cmd, "hatch.yaml", false)
	flags.register(cmd)
	cmd.Flags().BoolVarP(&opts.yes, "yes", "y", false, "apply without asking")
	cmd.Flags().BoolVar(&opts.noWait, "no-wait", false, "return once the plan is applied, without following the rollouts")
	return cmd
}
