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
		Short: "Make, list and revoke join tokens, named admin tokens and deploy tokens",
		Long: "Join tokens let a new host join: `hatch agent --server URL --join TOKEN` trades one for\n" +
			"the host's own identity and token. Named admin tokens (--admin --name alice) give a\n" +
			"person admin access under a name the event log records with what they ran. Deploy\n" +
			"tokens (--deploy -n NS PROJECT --name ci) give a CI pipeline one project: plan, apply,\n" +
			"roll back, status, history, events, logs and build-context uploads, and exec only with\n" +
			"--exec. The server keeps only a hash of each token.",
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newTokenCreateCmd(), newTokenListCmd(), newTokenRevokeCmd())
	return cmd
}

// tokenCreateFlags are `hatch token create`'s choices.
type tokenCreateFlags struct {
	join, admin, deploy, exec bool
	name, namespace           string
	ttl                       time.Duration
	uses                      int
}

// check refuses a combination of flags and arguments that makes no token,
// before anything is sent.
func (f tokenCreateFlags) check(args []string) error {
	kinds := 0
	for _, chosen := range []bool{f.join, f.admin, f.deploy} {
		if chosen {
			kinds++
		}
	}
	switch {
	case kinds != 1:
		return errors.New("say which kind of token: --join, --admin --name NAME, or --deploy [-n NAMESPACE] PROJECT --name NAME")
	case f.exec && !f.deploy:
		return errors.New("--exec goes with --deploy: an admin token may exec already, a join token never")
	case !f.deploy && len(args) > 0:
		return fmt.Errorf("unexpected argument %q: only --deploy takes one (the project)", args[0])
	case f.admin && f.name == "":
		return errors.New("--admin needs --name NAME: the name events record for what the token runs")
	case f.deploy && len(args) != 1:
		return errors.New("--deploy needs the project it may deploy: hatch token create --deploy [-n NAMESPACE] PROJECT --name NAME")
	case f.deploy && f.name == "":
		return errors.New("--deploy needs --name NAME: the name events record for what the pipeline runs (for example ci)")
	case f.deploy:
		if err := checkName("namespace", f.namespace); err != nil {
			return err
		}
		return checkName("project", args[0])
	case f.join && (f.ttl <= 0 || f.uses < 1):
		return fmt.Errorf("--ttl must be positive and --uses at least 1 (got %v and %d)", f.ttl, f.uses)
	}
	return nil
}

func newTokenCreateCmd() *cobra.Command {
	var (
		af apiFlags
		f  tokenCreateFlags
	)
	cmd := &cobra.Command{
		Use:   "create --join [--ttl 1h] [--uses N] | --admin --name NAME | --deploy [-n NAMESPACE] PROJECT --name NAME [--exec]",
		Short: "Make a join token, a named admin token or a project's deploy token and print it",
		Long: "Make a join token and print it on stdout (its ID, expiry and uses on stderr), an admin\n" +
			"token named NAME (events record what it ran under that name), or a deploy token named\n" +
			"NAME for the project PROJECT of the namespace -n: it may plan, apply, roll back and read\n" +
			"that project only (status, history, events, logs), upload its build contexts, and exec\n" +
			"into its eggs only with --exec; it may not touch another project, tokens, hosts or\n" +
			"destroy. A token is shown this once: the server keeps only its hash. It carries the\n" +
			"server's CA fingerprint, so whoever uses it verifies the server before sending it.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(args); err != nil {
				return err
			}
			return af.callAPI(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				switch {
				case f.admin:
					tok, err := c.AdminTokens().Create(ctx, f.name)
					if err != nil {
						return err
					}
					fmt.Fprintln(cmd.OutOrStdout(), tok.Token)
					fmt.Fprintf(cmd.ErrOrStderr(), "admin token %q made: give it to its holder, who sets %s=<token>\n"+
						"(or passes --server %s --token <token>); `hatch token revoke --admin %s` revokes it.\n",
						tok.Name, client.EnvToken, apiclient.JoinServers(c.Servers()), tok.Name)
					return nil
				case f.deploy:
					tok, err := c.AdminTokens().CreateDeploy(ctx, f.name, f.namespace, args[0], f.exec)
					if err != nil {
						return err
					}
					fmt.Fprintln(cmd.OutOrStdout(), tok.Token)
					fmt.Fprintf(cmd.ErrOrStderr(), "deploy token %q of %s/%s made (%s): store it as the pipeline's secret and set\n"+
						"%s=<token> and %s=%s in its environment; `hatch token revoke --deploy %s` revokes it.\n",
						tok.Name, tok.Namespace, tok.Project, execRight(tok.Exec), client.EnvToken, client.EnvServer,
						apiclient.JoinServers(c.Servers()), tok.Name)
					return nil
				}
				tok, err := c.JoinTokens().Create(ctx, f.ttl, f.uses)
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
	fl := cmd.Flags()
	fl.BoolVar(&f.join, "join", false, "make a join token (for `hatch agent --join`)")
	fl.BoolVar(&f.admin, "admin", false, "make a named admin token (with --name)")
	fl.BoolVar(&f.deploy, "deploy", false, "make a deploy token of the project PROJECT (with --name; -n for its namespace)")
	fl.BoolVar(&f.exec, "exec", false, "with --deploy: the token may also exec into the project's eggs")
	fl.StringVarP(&f.namespace, "namespace", "n", defaultNamespace, "with --deploy: the project's namespace")
	fl.StringVar(&f.name, "name", "", "the admin or deploy token's name, unique forever (letters, digits, '.', '_', '-')")
	fl.DurationVar(&f.ttl, "ttl", time.Hour, "how long the join token is valid")
	fl.IntVar(&f.uses, "uses", 1, "how many hosts may join with it")
	return cmd
}

// execRight says whether a deploy token may exec, as its listing says it.
func execRight(exec bool) string {
	if exec {
		return "may exec"
	}
	return "no exec"
}

func newTokenListCmd() *cobra.Command {
	var af apiFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List join tokens (IDs, expiry, uses, state), admin tokens and deploy tokens (names, projects, state)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return af.callAPI(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				tokens, err := c.JoinTokens().List(ctx)
				if err != nil {
					return err
				}
				named, err := c.AdminTokens().List(ctx)
				if err != nil {
					return err
				}
				if err := printJoinTokens(cmd.OutOrStdout(), tokens); err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout())
				return printNamedTokens(cmd.OutOrStdout(), named)
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

// printNamedTokens lists the named tokens, admin and deploy, as a table:
// a deploy token with its project and exec right. The server records no
// last use, so none is shown.
func printNamedTokens(w io.Writer, tokens []api.AdminToken) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tPROJECT\tEXEC\tSTATE\tCREATED")
	for _, t := range tokens {
		state := "active"
		switch {
		case !t.RevokedAt.IsZero():
			state = "revoked " + t.RevokedAt.Local().Format(time.DateTime)
		case t.First:
			state = "active (the first: in the server's data dir)"
		}
		project, exec := "(all)", "yes"
		if t.Kind == api.TokenKindDeploy {
			project, exec = t.Namespace+"/"+t.Project, "no"
			if t.Exec {
				exec = "yes"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, t.Kind, project, exec, state, t.CreatedAt.Local().Format(time.DateTime))
	}
	return tw.Flush()
}

func newTokenRevokeCmd() *cobra.Command {
	var (
		af            apiFlags
		admin, deploy bool
	)
	cmd := &cobra.Command{
		Use:   "revoke ID|TOKEN | --admin NAME | --deploy NAME",
		Short: "Revoke a join token (no host can join with it any more), a named admin token or a deploy token",
		Long: "Revoke a join token, named by its ID (`hatch token list`) or given whole. Hosts that\n" +
			"joined with it keep their own tokens: `hatch hosts remove` removes a host. With --admin\n" +
			"or --deploy, revoke the admin or deploy token named NAME: it is refused from its next\n" +
			"request on, and the streams and long-polls it holds open end at once.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if admin && deploy {
				return errors.New("--admin and --deploy each name one token: give one of them")
			}
			if admin || deploy {
				want := api.TokenKindAdmin
				if deploy {
					want = api.TokenKindDeploy
				}
				return af.callAPI(cmd.Context(), func(ctx context.Context, c *client.Client) error {
					if err := checkTokenKind(ctx, c, args[0], want); err != nil {
						return err
					}
					tok, err := c.AdminTokens().Revoke(ctx, args[0])
					if err != nil {
						return err
					}
					_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s token %q revoked\n", tok.Kind, tok.Name)
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
	cmd.Flags().BoolVar(&deploy, "deploy", false, "revoke the deploy token named by the argument")
	return cmd
}

// checkTokenKind refuses to revoke the named token when it is not of the
// kind the flag said (--admin for a deploy token, say): a mistaken name then
// revokes nothing. An unknown name is left to the revocation's own 404.
func checkTokenKind(ctx context.Context, c *client.Client, name, want string) error {
	all, err := c.AdminTokens().List(ctx)
	if err != nil {
		return err
	}
	for _, t := range all {
		if t.Name == name && t.Kind != want {
			return fmt.Errorf("%q is a%s %s token, not a%s %s token: revoke it with `hatch token revoke --%s %s`",
				name, article(t.Kind), t.Kind, article(want), want, t.Kind, name)
		}
	}
	return nil
}

// article is the indefinite article's ending before a token kind ("an admin", "a deploy").
func article(kind string) string {
	if kind == api.TokenKindAdmin {
		return "n"
	}
	return ""
}

// joinTokenID returns the ID a revoke names: the argument itself, or the ID
// of the join token given whole (computed here: the token is not sent).
func joinTokenID(arg string) (string, error) {
	tok, err := pki.ParseToken(arg)
	if err != nil {
		return arg, nil // an ID
	}
	switch tok.Kind {
	case pki.KindJoin:
	case pki.KindAdmin, pki.KindDeploy:
		return "", fmt.Errorf("that is a %s token, not a join token: `hatch token revoke --%s NAME` revokes it by its name (`hatch token list`)",
			tok.Kind, tok.Kind)
	default:
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
