package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/apiclient"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/termsafe"
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
				filter.project = resource.Project(flags.namespace, args[0])
			} else if cmd.Flags().Changed("namespace") {
				filter.namespace = flags.namespace
			}
			out := cmd.OutOrStdout()
			return flags.run(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				if follow {
					return followEvents(ctx, c, filter, out, cmd.ErrOrStderr())
				}
				var since int64
				for {
					page, err := c.Events().List(ctx, since)
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

// followEvents prints events as they come until ctx ends (Ctrl-C: the
// normal end, nil). A stream the control plane cuts (a restart) is taken up
// again after the last event printed; an answer refusing the request ends it.
func followEvents(ctx context.Context, c *client.Client, filter eventFilter, out, errOut io.Writer) error {
	var last int64
	lost := false
	for {
		err := c.Events().Follow(ctx, last, func(e api.Event) error {
			if lost {
				fmt.Fprintln(errOut, "(following again)")
				lost = false
			}
			last = e.Seq
			if filter.keep(e) {
				printEvent(out, e)
			}
			return nil
		})
		var apiErr *apiclient.APIError
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &apiErr):
			return err
		case !lost:
			fmt.Fprintf(errOut, "(lost the control plane: %v; trying again every second)\n", err)
			lost = true
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// eventFilter keeps the events of one project, or of one namespace's
// projects; host events (no project) are always kept.
type eventFilter struct {
	project   string // "namespace/project"
	namespace string
}

func (f eventFilter) keep(e api.Event) bool {
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
//
// A message may quote a host, and through it a container (a failed rollout's
// reason): each field is shown with termsafe.Line.
func printEvent(w io.Writer, e api.Event) {
	about := strings.TrimSpace(e.Project + " " + e.Resource)
	if about == "" {
		about = "host " + e.Host
	}
	msg := e.Message
	if e.Actor != "" {
		msg += " (by " + e.Actor + ")"
	}
	fmt.Fprintf(w, "%s  %-19s  %s  %s\n", e.Time.Local().Format("2006-01-02 15:04:05"),
		termsafe.Line(e.Type), termsafe.Line(about), termsafe.Line(msg))
}
