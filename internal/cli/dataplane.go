package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/dataplane"
)

// newDataPlaneCmd is the host's data plane process, which `hatch agent`
// starts (and upgrades in place) and feeds; users never run it themselves.
func newDataPlaneCmd() *cobra.Command {
	var (
		dataDir  string
		takeOver bool
		debug    bool
	)
	cmd := &cobra.Command{
		Use:    "dataplane --data-dir DIR [--take-over]",
		Short:  "Serve the host's ingress and mesh apart from the agent (started by `hatch agent`)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newDaemonLogger(debug)
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }() // stderr: nothing to do about a failed flush
			return dataplane.RunProcess(cmd.Context(), dataDir, takeOver, log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "/var/lib/hatch", "the agent's data directory, which holds the data plane's settings and socket")
	f.BoolVar(&takeOver, "take-over", false, "take the listeners over from the data plane running there (an in-place upgrade)")
	f.BoolVar(&debug, "debug", false, "log at debug level")
	return cmd
}

// newStopDataPlaneCmd is `hatch agent stop-dataplane`: the data plane
// outlives the agent, so stopping a host for good takes this too.
func newStopDataPlaneCmd() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "stop-dataplane [--data-dir DIR]",
		Short: "Stop the host's data plane (ingress, published ports, mesh), which outlives the agent, for good",
		Long: "Stop the host's data plane for good: it stops accepting, lets its requests in flight\n" +
			"finish (at most 30 s) and exits. The agent leaves it running when it stops, so that a\n" +
			"restart or an upgrade of the agent fails no request; the next `hatch agent` starts it again.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newDaemonLogger(false)
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }() // stderr: nothing to do about a failed flush
			stopped, err := dataplane.Stop(cmd.Context(), dataDir, log)
			if err != nil {
				return err
			}
			if stopped {
				fmt.Fprintln(cmd.OutOrStdout(), "data plane stopped")
			} else {
				fmt.Fprintln(cmd.OutOrStdout(), "no data plane runs for", dataDir)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "/var/lib/hatch", "the agent's data directory")
	return cmd
}
