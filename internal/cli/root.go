// Package cli holds the hatch command line: one file per subcommand, each a
// thin layer that parses flags and calls into the packages doing the work.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/termsafe"
)

// exitError carries an exit code other than 1 through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// Run executes the hatch command line and returns the process exit code. Errors
// are printed as one "hatch: ..." line on stderr, never as a stack trace.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var silent *exitError
	if errors.As(err, &silent) && silent.err == nil {
		return silent.code
	}
	// An error may carry the server's words, and through them a host's.
	fmt.Fprintf(stderr, "hatch: %s\n", termsafe.Text(err.Error()))
	if errors.As(err, &silent) {
		return silent.code
	}
	return 1
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "hatch",
		Short:         "Hatchery deploys containerised applications onto your own Docker hosts",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newVersionCmd(),
		newValidateCmd(),
		newGraphCmd(),
		newConvertCmd(),
		newServerCmd(),
		newAgentCmd(),
		newTokenCmd(),
		newRegistryCmd(),
		newHostsCmd(),
		newPlanCmd(),
		newApplyCmd(),
		newStatusCmd(),
		newDestroyCmd(),
		newEventsCmd(),
		newRolloutCmd(),
		newUpCmd(),
		newRelayCmd(),
		newDataPlaneCmd(),
		newLogsCmd(),
		newExecCmd(),
		newRunCmd(),
		newRunsCmd(),
		newScheduleCmd(),
		newHistoryCmd(),
		newRollbackCmd(),
		newVolumeCmd(),
	)
	return root
}
