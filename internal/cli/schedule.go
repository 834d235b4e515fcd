package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/client"
)

func newScheduleCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule run|pause|resume PROJECT EGG",
		Short: "Fire a scheduled egg now, or pause and resume its schedule",
		Long: "run fires the egg's schedule now, outside its ticks (a run like a tick's, with the egg's\n" +
			"own command); pause stops its ticks until resume (a tick missed while paused is not run\n" +
			"later). `hatch status PROJECT` shows each schedule and its next run.",
	}
	cmd.AddCommand(
		scheduleAction("run", "Run a scheduled egg now, outside its schedule", func(ctx context.Context, c *client.Client, ns, project, egg string) (string, error) {
			run, err := c.Runs().Fire(ctx, ns, project, egg)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("run %s of %s started on host %s (hatch runs %s %s)", run.ID, egg, runHost(run), project, egg), nil
		}),
		scheduleAction("pause", "Pause an egg's schedule: no run until resumed", func(ctx context.Context, c *client.Client, ns, project, egg string) (string, error) {
			return "schedule of " + egg + " paused", c.Runs().Pause(ctx, ns, project, egg)
		}),
		scheduleAction("resume", "Resume a paused schedule from its next tick", func(ctx context.Context, c *client.Client, ns, project, egg string) (string, error) {
			return "schedule of " + egg + " resumed", c.Runs().Resume(ctx, ns, project, egg)
		}),
	)
	return cmd
}

// scheduleAction is one of hatch schedule's subcommands: it calls do and
// prints what it says.
func scheduleAction(name, short string, do func(ctx context.Context, c *client.Client, ns, project, egg string) (string, error)) *cobra.Command {
	var flags projectFlags
	cmd := &cobra.Command{
		Use:   name + " PROJECT EGG",
		Short: short,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkName("project", args[0]); err != nil {
				return err
			}
			if err := checkName("egg", args[1]); err != nil {
				return err
			}
			return flags.run(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				ctx, cancel := context.WithTimeout(ctx, apiTimeout)
				defer cancel()
				msg, err := do(ctx, c, flags.namespace, args[0], args[1])
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(cmd.OutOrStdout(), msg)
				return err
			})
		},
	}
	flags.register(cmd)
	return cmd
}
