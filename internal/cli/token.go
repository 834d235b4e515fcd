package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/apiclient"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/store"
)

func newTokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Make, list and revoke join tokens and named admin tokens",
		Long: "Join tokens let a new host join: `hatch agent --server URL --join TOKEN` trades one for\n" +
			"the host's own identity and token. Named admin tokens (--admin --name alice) give a\n" +
			"person admin access under a name the event log records with what they ran. The\n" +
			"server keeps only a hash of each token.",
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newTokenCreateCmd(), newTokenListCmd(), newTokenRevokeCmd())
	return cmd
}

func newTokenCreateCmd() *cobra.Command {
	var (
		af          apiFlags
		join, admin bool
		name        string
		ttl         time.Duration
		uses        int
	)
	cmd := &cobra.Command{
		Use:   "create --join [--ttl 1h] [--uses N] | --admin --name NAME",
		Short: "Make a join token or a named admin token and print it",
		Long: "Make a join token and print it on stdout (its ID, expiry and uses on stderr), or an\n" +
			"admin token named NAME (events record what it ran under that name). It is shown this\n" +
			"once: the server keeps only its hash. It carries the server's CA fingerprint, so whoever\n" +
			"uses it verifies the server before sending it.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case join == admin:
				return errors.New("say which kind of token: --join, or --admin --name NAME")
			case admin && name == "":
				return errors.New("--admin needs --name NAME: the name events record for what the token runs")
			case admin:
				return af.callAPI(cmd.Context(), func(ctx context.Context, c *client.Client) error {
					tok, err := c.AdminTokens().Create(ctx, name)
					if err != nil {
						return err
					}
					fmt.Fprintln(cmd.OutOrStdout(), tok.Token)
					fmt.Fprintf(cmd.ErrOrStderr(), "admin token %q made: give it to its holder, who sets %s=<token>\n"+
						"(or passes --server %s --token <token>); `hatch token revoke --admin %s` revokes it.\n",
						tok.Name, client.EnvToken, apiclient.JoinServers(c.Servers()), tok.Name)
					return nil
				})
			}
			if ttl <= 0 || uses < 1 {
				return fmt.Errorf("--ttl must be positive and --uses at least 1 (got %v and %d)", ttl, uses)
			}
			return af.callAPI(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				tok, err := c.JoinTokens().Create(ctx, ttl, uses)
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), tok.Token)
				fmt.Fprintf(cmd.ErrOrStderr(), "join token %s: %s, valid until %s; on the new host run:\n  hatch agent --server %s --join <token>\n",
					tok.ID, plural(tok.MaxUses, "use"), tok.ExpiresAt.Local().Format(time.DateTime), apiclient.JoinServers(c.Servers()))
				return nil
			})
		},
	}
	af.register(cmd)
	f := cmd.Flags()
	f.BoolVar(&join, "join", false, "make a join token (for `hatch agent --join`)")
	f.BoolVar(&admin, "admin", false, "make a named admin token (with --name)")
	f.StringVar(&name, "name", "", "the admin token's name, unique forever (letters, digits, '.', '_', '-')")
	f.DurationVar(&ttl, "ttl", time.Hour, "how long the token is valid")
	f.IntVar(&uses, "uses", 1, "how many hosts may join with it")
	return cmd
}

func newTokenListCmd() *cobra.Command {
	var af apiFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List join tokens (IDs, expiry, uses, state) and admin tokens (names, state)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return af.callAPI(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				tokens, err := c.JoinTokens().List(ctx)
				if err != nil {
					return err
				}
				admins, err := c.AdminTokens().List(ctx)
				if err != nil {
					return err
				}
				if err := printJoinTokens(cmd.OutOrStdout(), tokens); err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout())
				return printAdminTokens(cmd.OutOrStdout(), admins)
			})
		},
	}
	af.register(cmd)
	return cmd
}

func printJoinTokens(w io.Writer, tokens []api.JoinToken) error {
	if len(tokens) == 0 {
		_, err := fmt.Fprintln(w, "no join tokens: `hatch token create --join` makes one")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tUSES\tCREATED\tEXPIRES")
	for _, t := range tokens {
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\t%s\n", t.ID, t.State, t.Uses, t.MaxUses,
			t.CreatedAt.Local().Format(time.DateTime), t.ExpiresAt.Local().Format(time.DateTime))
	}
	return tw.Flush()
}

// printAdminTokens lists admin tokens as a table.
func printAdminTokens(w io.Writer, tokens []api.AdminToken) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ADMIN TOKEN\tSTATE\tCREATED")
	for _, t := range tokens {
		state := "active"
		switch {
		case !t.RevokedAt.IsZero():
			state = "revoked " + t.RevokedAt.Local().Format(time.DateTime)
		case t.First:
			state = "active (the first: in the server's data dir)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Name, state, t.CreatedAt.Local().Format(time.DateTime))
	}
	return tw.Flush()
}

func newTokenRevokeCmd() *cobra.Command {
	var (
		af    apiFlags
		admin bool
	)
	cmd := &cobra.Command{
		Use:   "revoke ID|TOKEN | --admin NAME",
		Short: "Revoke a join token (no host can join with it any more) or a named admin token",
		Long: "Revoke a join token, named by its ID (`hatch token list`) or given whole. Hosts that\n" +
			"joined with it keep their own tokens: `hatch hosts remove` removes a host. With --admin,\n" +
			"revoke the admin token named NAME: it is refused from its next request on.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if admin {
				return af.callAPI(cmd.Context(), func(ctx context.Context, c *client.Client) error {
					tok, err := c.AdminTokens().Revoke(ctx, args[0])
					if err != nil {
						return err
					}
					_, err = fmt.Fprintf(cmd.OutOrStdout(), "admin token %q revoked\n", tok.Name)
					return err
				})
			}
			id, err := joinTokenID(args[0])
			if err != nil {
				return err
			}
			return af.callAPI(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				tok, err := c.JoinTokens().Revoke(ctx, id)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "join token %s revoked (%s used)\n", tok.ID, plural(tok.Uses, "time"))
				return err
			})
		},
	}
	af.register(cmd)
	cmd.Flags().BoolVar(&admin, "admin", false, "revoke the admin token named by the argument")
	return cmd
}

// joinTokenID returns the ID a revoke names: the argument itself, or the ID
// of the join token given whole (computed here: the token is not sent).
func joinTokenID(arg string) (string, error) {
	tok, err := pki.ParseToken(arg)
	if err != nil {
		return arg, nil // an ID
	}
	if tok.Kind != pki.KindJoin {
		return "", fmt.Errorf("that is a %s token, not a join token: `hatch hosts remove NAME` revokes a host's token", tok.Kind)
	}
	return store.JoinTokenID(tok.Hash()), nil
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
