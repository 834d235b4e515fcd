package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/apiclient"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/pki"
)

// apiFlags are the --server and --token flags of every command that talks
// to the control plane; what they leave unsaid is looked up as client.Lookup
// says (HATCH_SERVER/HATCH_TOKEN, ./.hatch, the user's config dir).
type apiFlags struct {
	// servers are the --server URLs (several servers of one control plane:
	// repeated, or comma-separated).
	servers []string
	token   string
}

func (f *apiFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringSliceVar(&f.servers, "server", nil, "the control plane's URL; several servers of one control plane repeated or "+
		"comma-separated, tried in order (default: $"+client.EnvServer+", ./.hatch, ~/.config/hatch)")
	cmd.Flags().StringVar(&f.token, "token", "", "the admin token (default: $"+client.EnvToken+", ./.hatch, ~/.config/hatch)")
}

// client returns an API client for the server found.
func (f *apiFlags) client() (*client.Client, error) {
	cfg, err := client.DefaultLookup(apiclient.JoinServers(apiclient.ParseServers(f.servers...)), f.token).Resolve()
	if err != nil {
		return nil, err
	}
	return client.New(cfg)
}

// apiTimeout bounds one plain API call of the CLI.
const apiTimeout = 30 * time.Second

// callAPI runs fn with an API client and a deadline, and turns the errors a
// user can cause into one line saying what to do.
func (f *apiFlags) callAPI(ctx context.Context, fn func(context.Context, *client.Client) error) error {
	c, err := f.client()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	return explainAPIError(c.Server(), fn(ctx, c))
}

// explainAPIError adds what to do to the errors of talking to the server.
func explainAPIError(server string, err error) error {
	var apiErr *apiclient.APIError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pki.ErrFingerprintMismatch):
		return fmt.Errorf("%s is not the server the token was made by (its certificate does not match the token's fingerprint): "+
			"check --server, or use a token of that server", server)
	case errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusUnauthorized && strings.Contains(apiErr.Message, "revoked"):
		// A named admin or deploy token revoked: its holder needs a new
		// one, not the data dir's.
		return fmt.Errorf("%s refused the token: %s", server, apiErr.Message)
	case errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusUnauthorized:
		// Whatever the server's reason (it writes for any HTTP client, and
		// already says where the admin token is), the fix is the same: every
		// command here needs the admin token. Saying it once is enough.
		return fmt.Errorf("%s refused the token: use the server's admin token, from its <data-dir>/admin-token", server)
	case errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusForbidden:
		return fmt.Errorf("%s: this token may not do that (%s): use the admin token", server, apiErr.Message)
	case errors.As(err, &apiErr):
		return errors.New(apiErr.Message)
	}
	return fmt.Errorf("cannot reach the control plane at %s: %w", server, err)
}
