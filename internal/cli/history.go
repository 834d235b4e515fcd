package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/termsafe"
)

func newHistoryCmd() *cobra.Command {
	var flags projectFlags
	cmd := &cobra.Command{
		Use:   "history PROJECT",
		Short: "List a project's applies: when, by whom, how they ended and what they changed",
		Long: "List the applies of a project the control plane keeps (the last 20 unless its\n" +
			"--keep-applies says otherwise), newest first: the apply's number, when it started,\n" +
			"the admin token that ran it, its outcome, the digest of its spec and build sources\n" +
			"(the same files give the same digest), and what it changed. `hatch rollback PROJECT\n" +
			"--to N` applies apply N's spec and sources again.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkName("project", args[0]); err != nil {
				return err
			}
			return flags.run(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				h, err := c.Projects().History(ctx, flags.namespace, args[0])
				if err != nil {
					return err
				}
				printHistory(cmd.OutOrStdout(), h)
				return nil
			})
		},
	}
	flags.register(cmd)
	return cmd
}

// printHistory shows the applies, one line each:
//
//	APPLY  STARTED              BY     OUTCOME    DIGEST        CHANGES
//	3      2026-12-01 16:00:00  alice  succeeded  3f9a0c1b2d4e  ~ egg/web [env] (rollback to 1)
//
// A token's name and a failure's message come from users and hosts: they
// are shown with termsafe.Line.
func printHistory(w io.Writer, h api.ApplyHistory) {
	if len(h.Applies) == 0 {
		fmt.Fprintf(w, "No apply of %s/%s is kept.\n", h.Namespace, h.Project)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "APPLY\tSTARTED\tBY\tOUTCOME\tDIGEST\tCHANGES")
	for _, a := range h.Applies {
		changes := a.Summary
		if a.RollbackOf > 0 {
			changes = strings.TrimSpace(changes + " (rollback to " + strconv.FormatInt(a.RollbackOf, 10) + ")")
		}
		if a.Outcome == "failed" && a.Message != "" {
			changes += "; failed: " + a.Message
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.Started.Local().Format("2006-01-02 15:04:05"),
			orDash(termsafe.Line(a.Actor)), termsafe.Line(a.Outcome), orDash(shortDigest(a.Digest)), orDash(termsafe.Line(changes)))
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "The control plane keeps the last %d applies of a project.\n", h.Keep)
}

// shortDigest is the first 12 hex digits of a sha256 digest.
func shortDigest(d string) string {
	hex := strings.TrimPrefix(d, "sha256:")
	if len(hex) > 12 {
		hex = hex[:12]
	}
	return termsafe.Line(hex)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
