package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/apiclient"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/pki"
)

// projectFlags are the flags every project command shares: where the
// server is, and the namespace.
type projectFlags struct {
	af        apiFlags
	namespace string
}

// defaultNamespace is the namespace of a command given no -n.
const defaultNamespace = "default"

func (f *projectFlags) register(cmd *cobra.Command) {
	f.af.register(cmd)
	cmd.Flags().StringVarP(&f.namespace, "namespace", "n", defaultNamespace,
		"the namespace: the same project in two namespaces is two independent deployments")
}

// namePattern is what a namespace and a project name may be.
var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,39}$`)

func checkName(what, name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("%s %q: use 1 to 40 of a-z, 0-9 and -, starting with a letter or digit", what, name)
	}
	return nil
}

// run calls fn with an API client for the server found, and makes the
// errors a user can cause say what to do.
func (f *projectFlags) run(ctx context.Context, fn func(context.Context, *client.Client) error) error {
	if err := checkName("namespace", f.namespace); err != nil {
		return err
	}
	c, err := f.af.client()
	if err != nil {
		return err
	}
	defer c.Close()
	return explainErr(c.Server(), fn(ctx, c))
}

// newDeployer returns a deployer writing to cmd's output, asking on its
// input when both are terminals.
func newDeployer(cmd *cobra.Command, c *client.Client) *deployer {
	out := cmd.OutOrStdout()
	return &deployer{
		c: c, out: out, in: cmd.InOrStdin(),
		terminal:    isTerminal(out),
		interactive: isTerminal(out) && isTerminal(cmd.InOrStdin()),
		poll:        500 * time.Millisecond,
		noHostGrace: 15 * time.Second,
	}
}

// explainErr turns what went wrong talking to the server into one line
// saying what to do; other errors pass as they are. An apply or rollout
// that failed has said why already: it only sets the exit code.
func explainErr(server string, err error) error {
	var (
		apiErr *apiclient.APIError
		urlErr *url.Error
	)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errApplyFailed):
		return &exitError{code: 1}
	case errors.Is(err, context.Canceled):
		return &exitError{code: 130}
	case errors.Is(err, syscall.ECONNREFUSED):
		where := "start it (`hatch server`), or point --server or " + client.EnvServer + " at it"
		if _, statErr := os.Stat(".hatch"); statErr == nil {
			where = "this directory's control plane is started by `hatch up`: run it (in another terminal), then try again"
		}
		return fmt.Errorf("no control plane answers at %s: %s", server, where)
	case errors.As(err, &apiErr) && apiErr.Message == "":
		return fmt.Errorf("the control plane at %s answered %d %s: its log says more", server, apiErr.StatusCode, http.StatusText(apiErr.StatusCode))
	case errors.As(err, &apiErr), errors.As(err, &urlErr), errors.Is(err, pki.ErrFingerprintMismatch):
		return explainAPIError(server, err)
	}
	return err
}
