package cli

import (
	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/spec"
)

func newConvertCmd() *cobra.Command {
	var pf projectFiles
	cmd := &cobra.Command{
		Use:   "convert -f compose.yaml [-f more.yaml] [--strict]",
		Short: "Print the hatch.yaml equivalent of a Compose project",
		Long: "Load a Compose project as docker compose does (interpolation, .env, env_file,\n" +
			"profiles, extends, several -f merged in order) and print the equivalent hatch.yaml:\n" +
			"applying either deploys the same resources. Paths in it are relative to the first\n" +
			"file's directory, so save it there. Every Compose setting Hatchery ignores or\n" +
			"approximates is printed as a warning on stderr; --strict makes them errors.\n" +
			"Given a hatch.yaml, it prints the file in its canonical form.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := pf.load(cmd)
			if err != nil {
				return err
			}
			out, err := spec.Marshal(p)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	pf.register(cmd, "compose.yaml", true)
	return cmd
}
