package serverd

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/hatchery/hatchery/internal/acme"
	"github.com/hatchery/hatchery/internal/fsutil"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/pki/authority"
	"github.com/hatchery/hatchery/internal/seal"
)

// SharedFiles are the files of a server's data dir that every server of one
// control plane must have the same of, relative to the data dir.
func SharedFiles() []string {
	var out []string
	for _, f := range append(authority.CAFiles, authority.HostCAFiles...) {
		out = append(out, filepath.Join("tls", f))
	}
	return append(out, sealKeyFile, adminTokenFile, acmeAccountFile, notifyKeyFile, backupKeyFile)
}

// InitShared is `hatch server init`: it writes the files every server of
// one control plane shares into dir (what a server makes at its first
// start, and knows by name), refusing if any is there. A failure part way
// removes what it wrote.
func InitShared(dir string, now time.Time, stdout io.Writer) error {
	for _, f := range SharedFiles() {
		if _, err := os.Lstat(filepath.Join(dir, f)); !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s exists: hatch server init writes a new CA, seal key and admin token, and never over "+
				"old ones (every token, host and sealed secret depends on them); give an empty or new directory", filepath.Join(dir, f))
		}
	}
	if err := fsutil.PrivateDir(dir, "tls", sealKeyFile, adminTokenFile, acmeAccountFile, notifyKeyFile, backupKeyFile); err != nil {
		return fmt.Errorf("hatch server init %s: %w", dir, err)
	}
	wrote := false
	defer func() {
		if !wrote {
			for _, f := range SharedFiles() {
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
	// One signing key for the webhooks, whichever server delivers them.
	if _, err := NotifySecret(dir, "", true); err != nil {
		return err
	}
	// One backup key: a volume's backups open with it, whichever server took them.
	if _, err := BackupKey(dir, true); err != nil {
		return err
	}
	tok := pki.NewToken(pki.KindAdmin, fingerprint)
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, adminTokenFile), []byte(tok.String()+"\n"), 0o600); err != nil {
		return fmt.Errorf("write admin token: %w", err)
	}
	wrote = true
	fmt.Fprintf(stdout, "wrote the CA (fingerprint %s), host CA, seal key, admin token, ACME account key, webhook signing key (notify.key) and backup key (backup.key: keep a copy offline) into %s\n", fingerprint, dir)
	fmt.Fprintf(stdout, "give every server a copy as its --data-dir, before its first start, all on one --store\n")
	return nil
}
