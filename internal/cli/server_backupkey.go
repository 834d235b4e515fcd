package cli

import (
	"encoding/hex"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/serverd"
)

func newServerBackupKeyCmd() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "backup-key",
		Short: "Print the cluster's backup key, to keep offline",
		Long: `Print the cluster's backup key (backup.key in the data dir of a server on this
machine): every volume backup is encrypted with a key derived from it. With this
key and the backup bucket (hatch server --backup-store), a new control plane lists
and restores every backup, so keep a copy offline, apart from the bucket: without
it the backups cannot be read, and with it anyone holding the bucket reads them.
The key goes to standard output alone, so that it can go into a secret store as it
is; the advice goes to standard error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := serverd.BackupKey(dataDir, false)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), hex.EncodeToString(key))
			fmt.Fprintln(cmd.ErrOrStderr(), "keep this key offline, apart from the backups: a new control plane needs it "+
				"(as <data-dir>/backup.key) to read them, and whoever holds it and the bucket reads them")
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "./hatch-data", "the server's data directory")
	return cmd
}
