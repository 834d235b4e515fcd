package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/serverd"
)

func newServerNotifyKeyCmd() *cobra.Command {
	var dataDir, secretFile, project string
	cmd := &cobra.Command{
		Use:   "notify-key",
		Short: "Print the key webhook receivers verify deliveries with",
		Long: `Print the key that a webhook receiver checks a delivery's Hatch-Signature
with: the server's own (notify.key in the data dir, or --notify-secret-file),
which signs the deliveries to hatch server --notify targets, or with --project
NAMESPACE/NAME the key of that project's own notify: targets, derived from the
server's (a project's key verifies nothing of another project's or of the
cluster's). It reads the data dir of a server on this machine, and prints
nothing else, so that it can go into a secret store as it is.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := serverd.NotifyKey(dataDir, secretFile, project)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), key)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "./hatch-data", "the server's data directory")
	f.StringVar(&secretFile, "notify-secret-file", "", "the server's --notify-secret-file, if it has one")
	f.StringVar(&project, "project", "", "NAMESPACE/NAME: print that project's key instead of the server's")
	return cmd
}
