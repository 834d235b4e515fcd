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
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/store"
)

func newTokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Make, list and revoke join tokens",
		Long: "Join tokens let a new host join: `hatch agent --server URL --join TOKEN` trades one for\n" +
			"the host's own identity and token. The server keeps only a hash of each token.",
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newTokenCreateCmd(), newTokenListCmd(), newTokenRevokeCmd())
	return cmd
}

func newTokenCreateCmd() *cobra.Command {
	var (
		af   apiFlags
		join bool
		ttl  time.Duration
		uses int
	)
	cmd := &cobra.Command{
		Use:   "create --join [--ttl 1h] [--uses N]",
		Short: "Make a join token and print it",
		Long: "Make a join token and print it on stdout (its ID, expiry and uses on stderr). It is\n" +
			"shown this once: the server keeps only its hash. It carries the server's CA\n" +
			"fingerprint, so the agent that uses it verifies the server before sending it.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !join {
				return errors.New("say which kind of token: --join (the only kind for now)")
			}
			if ttl <= 0 || uses < 1 {
				return fmt.Errorf("--ttl must be positive and --uses at least 1 (got %v and %d)", ttl, uses)
			}
			return af.callAPI(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				tok, err := c.CreateJoinToken(ctx, ttl, uses)
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), tok.Token)
				fmt.Fprintf(cmd.ErrOrStderr(), "join token %s: %s, valid until %s; on the new host run:\n  hatch agent --server %s --join <token>\n",
					tok.ID, plural(tok.MaxUses, "use"), tok.ExpiresAt.Local().Format(time.DateTime), c.Server())
				return nil
			})
		},
	}
	af.register(cmd)
	f := cmd.Flags()
	f.BoolVar(&join, "join", false, "make a join token (for `hatch agent --join`)")
	f.DurationVar(&ttl, "ttl", time.Hour, "how long the token is valid")
	f.IntVar(&uses, "uses", 1, "how many hosts may join with it")
	return cmd
}

func newTokenListCmd() *cobra.Command {
	var af apiFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List join tokens: their IDs, expiry, uses and state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return af.callAPI(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				tokens, err := c.JoinTokens(ctx)
				if err != nil {
					return err
				}
				return printJoinTokens(cmd.OutOrStdout(), tokens)
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

func newTokenRevokeCmd() *cobra.Command {
	var af apiFlags
	cmd := &cobra.Command{
		Use:   "revoke ID|TOKEN",
		Short: "Revoke a join token: no host can join with it any more",
		Long: "Revoke a join token, named by its ID (`hatch token list`) or given whole. Hosts that\n" +
			"joined with it keep their own tokens: `hatch hosts remove` removes a host.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := joinTokenID(args[0])
			if err != nil {
				return err
			}
			return af.callAPI(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				tok, err := c.RevokeJoinToken(ctx, id)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "join token %s revoked (%s used)\n", tok.ID, plural(tok.Uses, "time"))
				return err
			})
		},
	}
	af.register(cmd)
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
