package cli

import (
	"cmp"
	"context"
	"fmt"
	"github.com/hatchery/hatchery/internal/termsafe"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/placement"
)

func newHostsCmd() *cobra.Command {
	var af apiFlags
	cmd := &cobra.Command{
		Use:   "hosts",
		Short: "List the hosts: name, ID, liveness, last report",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return af.callAPI(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				hosts, err := c.Hosts().List(ctx)
				if err != nil {
					return err
				}
				return printHosts(cmd.OutOrStdout(), hosts, time.Now())
			})
		},
	}
	af.register(cmd)
	cmd.AddCommand(newHostsRemoveCmd(), newHostsSetCmd())
	return cmd
}

func printHosts(w io.Writer, hosts []api.Host, now time.Time) error {
	if len(hosts) == 0 {
		_, err := fmt.Fprintln(w, "no hosts: on a Docker host, run `hatch agent --server URL --join TOKEN` "+
			"with a token from `hatch token create --join`")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tSTATE\tLAST SEEN\tCAPACITY\tPROBLEMS")
	var problems []string
	for _, h := range hosts {
		state := h.State
		switch {
		case !h.RemovedAt.IsZero():
			state = "removed"
		case h.Engine != nil && h.State == "up":
			state = "up, engine unresponsive"
		}
		seen := "never"
		if !h.LastSeen.IsZero() {
			seen = now.Sub(h.LastSeen).Round(time.Second).String() + " ago"
		}
		errs := h.Errors
		if h.Capacity != nil && h.Capacity.Problem != "" {
			errs = append(slices.Clip(errs), h.Capacity.Problem)
		}
		if h.Engine != nil {
			errs = append(slices.Clip(errs), fmt.Sprintf("the Docker Engine has not answered since %s (%s): its replicas count as not ready",
				h.Engine.Since.Local().Format(time.TimeOnly), h.Engine.Reason))
		}
		count := "-"
		if len(errs) > 0 {
			count = strconv.Itoa(len(errs))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", termsafe.Line(h.Name), h.ID, state, seen, capacityCell(h.Capacity), count)
		for _, e := range errs {
			problems = append(problems, termsafe.Line(cmp.Or(h.Name, h.ID)+": "+e))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(problems) == 0 {
		return nil
	}
	// Below the table: a line each, as long as it needs. Names and errors
	// come from the hosts: termsafe keeps them from acting on the terminal.
	_, err := fmt.Fprintf(w, "\nProblems the agents report:\n  %s\n", strings.Join(problems, "\n  "))
	return err
}

// capacityCell shows the capacity placement believes of a host, and where
// it comes from when that is not the host's own report: "8 GiB and 4 CPUs
// (pinned)", "(limited)" when the report claims more than is believed.
func capacityCell(c *api.HostCapacity) string {
	if c == nil {
		return "-"
	}
	text := placement.Resources{Memory: c.Believed.MemoryBytes, MilliCPU: c.Believed.MilliCPU}.String()
	if c.Source != string(placement.CapacityReported) {
		text += " (" + c.Source + ")"
	}
	return text
}

func newHostsRemoveCmd() *cobra.Command {
	var af apiFlags
	cmd := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a host: its token is refused at once and its replicas go elsewhere",
		Long: "Remove a host: its agent's token is refused from its next request on, and its\n" +
			"replicas are placed on the other hosts. Its containers keep running: stop the agent\n" +
			"and remove them on that machine. To bring it back, join it again with a new join token.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return af.callAPI(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				h, err := c.Hosts().Remove(ctx, args[0])
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "host %s (%s) removed: its token is refused; its containers keep running "+
					"until you stop them on that machine\n", h.Name, h.ID)
				return err
			})
		},
	}
	af.register(cmd)
	return cmd
}
