package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

func newEventsCmd() *cobra.Command {
	var (
		flags  projectFlags
		follow bool
	)
	cmd := &cobra.Command{
		Use:   "events [PROJECT] [--follow]",
		Short: "Show the control plane's events: hosts, applies, resources, rollouts",
		Long: "Show the control plane's event log, oldest first: hosts going up and down, applies,\n" +
			"resources created, updated and deleted, rollouts progressing, done or failed. With\n" +
			"PROJECT, only that project's events (of the namespace -n), with hosts' events; with\n" +
			"-n alone, the events of that namespace's projects and of hosts. --follow goes on\n" +
			"printing new events as they happen, until Ctrl-C.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			filter := eventFilter{}
			if len(args) == 1 {
				if err := checkName("project", args[0]); err != nil {
					return err
				}
				filter.project = flags.namespace + "/" + args[0]
			} else if cmd.Flags().Changed("namespace") {
				filter.namespace = flags.namespace
			}
			out := cmd.OutOrStdout()
			return flags.run(cmd.Context(), func(ctx context.Context, api projectAPI) error {
				if follow {
					err := api.FollowEvents(ctx, 0, func(e event) error {
						if filter.keep(e) {
							printEvent(out, e)
						}
						return nil
					})
					if ctx.Err() != nil {
						return nil // Ctrl-C: the normal end of following
					}
					return err
				}
				var since int64
				for {
					page, err := api.Events(ctx, since)
					if err != nil {
						return err
					}
					if len(page) == 0 {
						return nil
					}
					for _, e := range page {
						if filter.keep(e) {
							printEvent(out, e)
						}
						since = e.Seq
					}
				}
			})
		},
	}
	flags.register(cmd)
	cmd.Flags().BoolVarP(&follow, "follow", "F", false, "keep printing new events until Ctrl-C")
	return cmd
}

// eventFilter keeps the events of one project, or of one namespace's
// projects; host events (no project) are always kept.
type eventFilter struct {
	project   string // "namespace/project"
	namespace string
}

func (f eventFilter) keep(e event) bool {
	switch {
	case e.Project == "":
		return true
	case f.project != "":
		return e.Project == f.project
	case f.namespace != "":
		return strings.HasPrefix(e.Project, f.namespace+"/")
	}
	return true
}

// printEvent prints one event on one line:
//
//	2025-03-01 12:00:00  rollout.done  default/demo egg/web  web on h-1a2b: 3/3 replicas ready at the new spec
func printEvent(w io.Writer, e event) {
	about := strings.TrimSpace(e.Project + " " + e.Resource)
	if about == "" {
		about = "host " + e.Host
	}
	fmt.Fprintf(w, "%s  %-19s  %s  %s\n", e.Time.Local().Format("2006-01-02 15:04:05"), e.Type, about, e.Message)
}
