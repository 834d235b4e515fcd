package cli

import (
	"github.com/hatchery/hatchery/internal/client"

	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

func newRolloutCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Act on an egg's rollout",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newRolloutRestartCmd())
	return cmd
}

func newRolloutRestartCmd() *cobra.Command {
	var (
		flags  projectFlags
		noWait bool
	)
	cmd := &cobra.Command{
		Use:   "restart PROJECT/EGG",
		Short: "Roll an egg again with the same spec (a new revision), e.g. to retry a failed rollout",
		Long: "Roll an egg again with the same spec: its revision is bumped, so every host running\n" +
			"it replaces its containers one by one, as for a new version (start-first, without\n" +
			"dropping a request, or stop-first for an egg with a volume). This retries a failed\n" +
			"rollout too. Then it follows the rollout, as apply does, unless --no-wait.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			project, egg, ok := strings.Cut(args[0], "/")
			if !ok || egg == "" {
				return fmt.Errorf("%q: name the egg as PROJECT/EGG, for example demo/web", args[0])
			}
			if err := checkName("project", project); err != nil {
				return err
			}
			return flags.run(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				rev, err := c.Projects().RestartEgg(ctx, flags.namespace, project, egg)
				if err != nil {
					return err
				}
				d := newDeployer(cmd, c)
				fmt.Fprintf(d.out, "%s/%s/%s rolls again (revision %d).\n", flags.namespace, project, egg, rev.Revision)
				if noWait {
					return nil
				}
				return d.waitRollouts(ctx, flags.namespace, project, []string{egg})
			})
		},
	}
	flags.register(cmd)
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return at once, without following the rollout")
	return cmd
}
