package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

func newGraphCmd() *cobra.Command {
	var pf projectFiles
	var format string
	cmd := &cobra.Command{
		Use:   "graph -f FILE [--format text|dot]",
		Short: "Show a project's resources in the order they are deployed",
		Long: "Load a project file and print its resource graph: as text, one resource per line\n" +
			"in dependency order with the resources it needs, or as Graphviz (--format dot,\n" +
			"for example piped to `dot -Tsvg`).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "text" && format != "dot" {
				return fmt.Errorf("unknown --format %q: use text or dot", format)
			}
			p, err := pf.load(cmd)
			if err != nil {
				return err
			}
			g, err := p.Graph()
			if err != nil {
				return fmt.Errorf("build the graph of %s: %w", &pf, err)
			}
			out := g.Text()
			if format == "dot" {
				out = g.DOT(p.Name)
			}
			_, err = io.WriteString(cmd.OutOrStdout(), out)
			return err
		},
	}
	pf.register(cmd, "hatch.yaml", false)
	cmd.Flags().StringVar(&format, "format", "text", "text or dot (Graphviz)")
	return cmd
}
