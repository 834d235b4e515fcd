package cli

import (
	"fmt"
	"io"

	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/pki"
)

// writeCLIConfig writes the config the CLI of this machine finds the server
// with (see client.Lookup). A file that holds another server's admin token is
// left as it is: it is someone's way to another control plane.
func writeCLIConfig(path string, cfg client.Config, stdout io.Writer) error {
	old, ok, err := client.Load(path)
	if err != nil {
		return err
	}
	if old == cfg {
		return nil
	}
	if ok && !sameSecret(old.Token, cfg.Token) {
		fmt.Fprintf(stdout, "%s names another server: left as it is (use --server and --token, or %s and %s)\n",
			path, client.EnvServer, client.EnvToken)
		return nil
	}
	if err := client.Save(path, cfg); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "CLI config written to %s: hatch commands on this machine use this server\n", path)
	return nil
}

// sameSecret reports whether two tokens have the same secret (a token file
// and its copy, perhaps with another fingerprint).
func sameSecret(a, b string) bool {
	ta, errA := pki.ParseToken(a)
	tb, errB := pki.ParseToken(b)
	return errA == nil && errB == nil && pki.EqualHash(ta.Hash(), tb.Hash())
}
