package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/acme"
	"github.com/hatchery/hatchery/internal/fsutil"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/pki/authority"
	"github.com/hatchery/hatchery/internal/seal"
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
			return runServerInit(args[0], time.Now(), cmd.OutOrStdout())
		},
	}
}

// sharedFiles are the files of a server's data dir that every server of one
// control plane must have the same of, relative to the data dir.
func sharedFiles() []string {
	var out []string
	for _, f := range append(authority.CAFiles, authority.HostCAFiles...) {
		out = append(out, filepath.Join("tls", f))
	}
	return append(out, sealKeyFile, adminTokenFile, acmeAccountFile)
}

// runServerInit writes the shared files into dir, refusing if any is there.
// A failure part way removes what it wrote.
func runServerInit(dir string, now time.Time, stdout io.Writer) error {
	for _, f := range sharedFiles() {
		if _, err := os.Lstat(filepath.Join(dir, f)); !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s exists: hatch server init writes a new CA, seal key and admin token, and never over "+
				"old ones (every token, host and sealed secret depends on them); give an empty or new directory", filepath.Join(dir, f))
		}
	}
	if err := fsutil.PrivateDir(dir, "tls", sealKeyFile, adminTokenFile, acmeAccountFile); err != nil {
		return fmt.Errorf("hatch server init %s: %w", dir, err)
	}
	wrote := false
	defer func() {
		if !wrote {
			for _, f := range sharedFiles() {
				_ = os.Remove(filepath.Join(dir, f))
			}
		}
	}()
	tlsDir := filepath.Join(dir, "tls")
	fingerprint, err := authority.CreateCA(tlsDir, now)
	if err != nil {
		return err
	}
	if _, err := authority.LoadOrCreateHostCA(tlsDir, authority.MaxHostLifetime, now); err != nil {
		return err
	}
	box, err := seal.LoadOrCreate(filepath.Join(dir, sealKeyFile))
	if err != nil {
		return err
	}
	// One ACME account for the control plane, whichever server orders.
	if _, err := acme.WriteAccountKey(filepath.Join(dir, acmeAccountFile), box); err != nil {
		return err
	}
	tok := pki.NewToken(pki.KindAdmin, fingerprint)
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, adminTokenFile), []byte(tok.String()+"\n"), 0o600); err != nil {
		return fmt.Errorf("write admin token: %w", err)
	}
	wrote = true
	fmt.Fprintf(stdout, "wrote the CA (fingerprint %s), host CA, seal key, admin token and ACME account key into %s\n", fingerprint, dir)
	fmt.Fprintf(stdout, "give every server a copy as its --data-dir, before its first start, all on one --store\n")
	return nil
}
