package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/termsafe"
)

func newRunsCmd() *cobra.Command {
	var flags projectFlags
	cmd := &cobra.Command{
		Use:   "runs PROJECT [EGG]",
		Short: "List a project's runs (hatch run and schedules), newest first",
		Long: "List the project's runs, newest first (of EGG only, if given): their ID, egg, trigger\n" +
			"(manual: hatch run; schedule: a tick on time; missed: a tick run late, within its\n" +
			"starting deadline; fire: hatch schedule run), who asked, the host, when it started,\n" +
			"how long it ran, its state and exit code. A kept run's output: hatch logs PROJECT EGG\n" +
			"--run ID.",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkName("project", args[0]); err != nil {
				return err
			}
			egg := ""
			if len(args) == 2 {
				if err := checkName("egg", args[1]); err != nil {
					return err
				}
				egg = args[1]
			}
			return flags.run(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				ctx, cancel := context.WithTimeout(ctx, apiTimeout)
				defer cancel()
				runs, err := c.Runs().List(ctx, flags.namespace, args[0], egg)
				if err != nil {
					return err
				}
				return printRuns(cmd.OutOrStdout(), runs, time.Now())
			})
		},
	}
	flags.register(cmd)
	return cmd
}

// printRuns prints the runs as a table; a run still going shows how long
// it has run so far.
//
//	ID        EGG      TRIGGER   ACTOR  HOST   STARTED              DURATION  STATE   EXIT
//	r-7f3a    migrate  manual    admin  local  2026-12-02 14:03:11  2.1s      exited  0
func printRuns(w io.Writer, runs []api.Run, now time.Time) error {
	if len(runs) == 0 {
		_, err := fmt.Fprintln(w, "no runs: `hatch run PROJECT EGG -- CMD` starts one; an egg's schedule makes them too")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tEGG\tTRIGGER\tACTOR\tHOST\tSTARTED\tDURATION\tSTATE\tEXIT")
	for _, r := range runs {
		started, duration, exit := "-", "-", "-"
		if !r.StartedAt.IsZero() {
			started = r.StartedAt.Local().Format(time.DateTime)
			end := r.EndedAt
			if end.IsZero() {
				end = now
			}
			duration = end.Sub(r.StartedAt).Round(100 * time.Millisecond).String()
		}
		if r.Ended() && !r.EndedAt.IsZero() {
			exit = strconv.Itoa(r.ExitCode)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termsafe.Line(r.ID), termsafe.Line(r.Egg), termsafe.Line(r.Trigger),
			orDash(termsafe.Line(r.Actor)), termsafe.Line(runHost(r)), started, duration, termsafe.Line(r.State), exit)
	}
	return tw.Flush()
}
