package cli

import (
	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/relay"
)

// newRelayCmd is the entry point of the relay containers the agent runs for
// eggs that consumers on its host reference; users never run it themselves.
func newRelayCmd() *cobra.Command {
	cfg := relay.DefaultConfig()
	cmd := &cobra.Command{
		Use:    "relay --listen :PORT --socket PATH",
		Short:  "Stand for an egg on a Docker network, passing connections to the agent (run by the agent)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newDaemonLogger(false)
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }() // stderr: nothing to do about a failed flush
			cfg.Logger = log
			return relay.Run(cmd.Context(), cfg)
		},
	}
	cmd.Flags().StringVar(&cfg.Listen, "listen", "", "TCP address consumers connect to (\":<egg port>\")")
	cmd.Flags().StringVar(&cfg.Socket, "socket", "", "the agent's Unix socket for this egg")
	cmd.Flags().DurationVar(&cfg.DialTimeout, "dial-timeout", cfg.DialTimeout, "how long to wait for the agent to accept a connection")
	return cmd
}
