package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/termsafe"
)

func newRegistryCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "registry",
		Short: "Keep the cluster-wide logins to private image registries",
		Long: "A cluster-wide login lets every egg whose image is in that registry pull it, unless its\n" +
			"project gives a login of its own (registries: in hatch.yaml). The server keeps the\n" +
			"password sealed and hands it only to the hosts pulling from that registry; no answer,\n" +
			"log or event shows it. A new login reaches the hosts at once and rolls nothing.",
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newRegistryLoginCmd(), newRegistryLogoutCmd(), newRegistryListCmd())
	return cmd
}

func newRegistryLoginCmd() *cobra.Command {
	var af apiFlags
	var username, passwordFile string
	cmd := &cobra.Command{
		Use:   "login HOST --username USER [--password-file FILE]",
		Short: "Store the login for a registry host (the password from stdin, or a file: never a flag)",
		Example: "  echo \"$GHCR_TOKEN\" | hatch registry login ghcr.io --username acme-ci\n" +
			"  hatch registry login registry.example.com:5000 --username ci --password-file ./registry-password",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			host := args[0]
			if !contract.ValidRegistryHost(host) {
				return fmt.Errorf("%q is not a registry host: give its hostname, with a port if it has one, as image references name it (ghcr.io, registry.example.com:5000; docker.io for Docker Hub)", host)
			}
			if username == "" {
				return errors.New("--username is required")
			}
			password, err := readPassword(cmd.InOrStdin(), passwordFile)
			if err != nil {
				return err
			}
			return af.callAPI(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				l, err := c.Registries().Login(ctx, host, username, password)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "logged in to %s as %s: the eggs pulling from it without a login of their project's use it now\n", termsafe.Line(l.Host), termsafe.Line(l.Username))
				return err
			})
		},
	}
	cmd.Flags().StringVar(&username, "username", "", "the registry user")
	cmd.Flags().StringVar(&passwordFile, "password-file", "", "read the password from this file (default: stdin)")
	af.register(cmd)
	return cmd
}

// readPassword reads a password from the file, or from stdin when file is
// "", without its trailing newline. An empty one is refused.
func readPassword(stdin io.Reader, file string) (string, error) {
	var data []byte
	var err error
	what := "stdin"
	if file != "" {
		what = file
		data, err = os.ReadFile(file)
	} else {
		data, err = io.ReadAll(io.LimitReader(stdin, 1<<20))
	}
	if err != nil {
		return "", fmt.Errorf("read the password from %s: %w", what, err)
	}
	password := string(bytes.TrimRight(data, "\r\n"))
	if password == "" {
		return "", fmt.Errorf("the password from %s is empty: pipe it in (echo \"$TOKEN\" | hatch registry login ...) or give --password-file", what)
	}
	return password, nil
}

func newRegistryLogoutCmd() *cobra.Command {
	var af apiFlags
	cmd := &cobra.Command{
		Use:   "logout HOST",
		Short: "Delete the login for a registry host: its eggs pull without it from then on",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return af.callAPI(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				if _, err := c.Registries().Logout(ctx, args[0]); err != nil {
					return err
				}
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "logged out of %s\n", args[0])
				return err
			})
		},
	}
	af.register(cmd)
	return cmd
}

func newRegistryListCmd() *cobra.Command {
	var af apiFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the registry logins (hosts and users, never passwords)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return af.callAPI(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				all, err := c.Registries().List(ctx)
				if err != nil {
					return err
				}
				return printRegistries(cmd.OutOrStdout(), all)
			})
		},
	}
	af.register(cmd)
	return cmd
}

func printRegistries(w io.Writer, all []api.RegistryLogin) error {
	if len(all) == 0 {
		_, err := fmt.Fprintln(w, "no registry logins: `hatch registry login HOST --username USER` stores one")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REGISTRY\tUSERNAME\tUPDATED")
	for _, l := range all {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", termsafe.Line(l.Host), termsafe.Line(l.Username), l.UpdatedAt.Local().Format(time.DateTime))
	}
	return tw.Flush()
}
