package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/client"
)

func newRollbackCmd() *cobra.Command {
	var (
		flags projectFlags
		opts  deployOptions
		to    int64
	)
	cmd := &cobra.Command{
		Use:   "rollback PROJECT [APPLY] [--to APPLY] [--yes] [--no-wait]",
		Short: "Apply an earlier apply's spec and build sources again (default: the last successful one before the current)",
		Long: "Plan applying again the spec and build sources of an earlier apply (`hatch history`\n" +
			"lists them; default: the last successful apply before the newest one), show the plan\n" +
			"and, once confirmed (--yes skips the question), apply it as `hatch apply` does: under\n" +
			"the project's lock, rolling each egg without dropping a request, then following the\n" +
			"rollouts. The rollback is itself an apply of the history, which can be rolled back.\n" +
			"Secrets are taken at their current values (the plan says so). An apply the control\n" +
			"plane no longer keeps (hatch server --keep-applies), or one whose build context or\n" +
			"secret is gone, is refused before anything changes.",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			project := args[0]
			if err := checkName("project", project); err != nil {
				return err
			}
			target, err := rollbackTarget(args[1:], to, cmd.Flags().Changed("to"))
			if err != nil {
				return err
			}
			opts.namespace = flags.namespace
			return flags.run(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				d := newDeployer(cmd, c)
				pl, err := c.Projects().PlanRollback(ctx, opts.namespace, project, target)
				if err != nil {
					return err
				}
				fmt.Fprintf(d.out, "Rolling %s/%s back to apply %d.\n", opts.namespace, project, pl.RollbackOf)
				printPlan(d.out, opts.namespace+"/"+project, pl)
				if !pl.HasChanges {
					fmt.Fprintf(d.out, "No changes: %s/%s already runs apply %d's spec.\n", opts.namespace, project, pl.RollbackOf)
				} else if err := d.applyPlan(ctx, opts, project, pl, "Apply"); err != nil {
					return err
				}
				if opts.noWait {
					fmt.Fprintf(d.out, "Not waiting for the rollouts: `%s` shows them.\n", statusCommand(opts.namespace, project))
					return nil
				}
				var eggs []string
				for _, ch := range pl.Changes {
					if egg, ok := strings.CutPrefix(ch.Key, "egg/"); ok && ch.Action != "-" {
						eggs = append(eggs, egg)
					}
				}
				return d.waitRollouts(ctx, opts.namespace, project, eggs)
			})
		},
	}
	flags.register(cmd)
	cmd.Flags().Int64Var(&to, "to", 0, "the apply to go back to (hatch history lists them)")
	cmd.Flags().BoolVarP(&opts.yes, "yes", "y", false, "apply without asking")
	cmd.Flags().BoolVar(&opts.noWait, "no-wait", false, "return once the plan is applied, without following rollouts")
	return cmd
}

// rollbackTarget reads the apply to go back to, given as an argument or
// --to (0: the server's default).
func rollbackTarget(args []string, to int64, toSet bool) (int64, error) {
	if toSet && to <= 0 {
		return 0, fmt.Errorf("--to %d: give the number of an apply (`hatch history` lists them)", to)
	}
	if len(args) == 0 {
		return to, nil
	}
	n, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not the number of an apply: `hatch history` lists them", args[0])
	}
	if toSet && to != n {
		return 0, errors.New("give the apply once: as an argument or with --to, not both")
	}
	return n, nil
}
