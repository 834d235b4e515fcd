package cli

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/serverd"
)

func newServerInitCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "init DIR",
		Short: "Write, once, the CA, seal key and admin token that several servers share",
		Long: `Write into DIR (made 0700 if missing) what every server of one control plane
must share, and nothing else: the CA that tokens pin (tls/ca.pem, tls/ca-key.pem),
the host CA that signs the hosts' mesh certificates (tls/host-ca.pem,
tls/host-ca-key.pem), the seal key that secret values are sealed with at rest
(seal.key), the admin token (admin-token) and the ACME account's key, sealed
(acme-account.key: one account whichever server orders), every file 0600. These are the
files hatch server makes at its first start; none of them goes into the
database (which keeps only the admin token's hash, and secret values sealed).

Give each server a copy of DIR as its --data-dir before it first starts, all
on one database (--store or HATCH_STORE): each signs its own serving
certificate with the shared CA, for its own names, so hosts and clients that
pinned the CA trust every server. It refuses to write over any of these
files: a new CA or seal key would orphan every token and host, and every
secret sealed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return serverd.InitShared(args[0], time.Now(), cmd.OutOrStdout())
		},
	}
}
