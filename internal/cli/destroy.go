package cli

import (
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/contract"

	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func newDestroyCmd() *cobra.Command {
	var (
		flags   projectFlags
		opts    deployOptions
		volumes bool
	)
	cmd := &cobra.Command{
		Use:   "destroy PROJECT [--yes] [--volumes]",
		Short: "Remove everything a project has deployed (volumes are kept unless --volumes)",
		Long: "Remove everything a project has deployed: its containers, networks, routes and\n" +
			"secrets on every host. Volumes are kept on their hosts, with their data, unless\n" +
			"--volumes is given: then they are deleted too, those retained earlier included.\n" +
			"The plan is shown and, on a terminal, confirmed (--yes skips the question).",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			project := args[0]
			if err := checkName("project", project); err != nil {
				return err
			}
			opts.namespace = flags.namespace
			return flags.run(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				d := newDeployer(cmd, c)
				if _, ok, err := c.Projects().Get(ctx, opts.namespace, project); err != nil {
					return err
				} else if !ok {
					return fmt.Errorf("no project %s/%s on this server: `hatch status` lists every project", opts.namespace, project)
				}
				pl, err := c.Projects().PlanDestroy(ctx, opts.namespace, project, volumes)
				if err != nil {
					return err
				}
				printPlan(d.out, opts.namespace+"/"+project, pl)
				if pl.HasChanges {
					if err := d.applyPlan(ctx, opts, project, pl, "Destroy"); err != nil {
						return err
					}
				}
				if !opts.noWait {
					if err := d.waitGone(ctx, opts.namespace, project); err != nil {
						return err
					}
				}
				if !volumes {
					fmt.Fprintf(d.out, "Volumes are kept on their hosts: `hatch destroy %s --volumes` deletes them and their data.\n", project)
				}
				return nil
			})
		},
	}
	flags.register(cmd)
	cmd.Flags().BoolVarP(&opts.yes, "yes", "y", false, "destroy without asking")
	cmd.Flags().BoolVar(&volumes, "volumes", false, "delete the project's volumes and their data too")
	cmd.Flags().BoolVar(&opts.noWait, "no-wait", false, "return once the plan is applied, without waiting for the containers to go")
	return cmd
}

// waitGone waits until no host that is up reports a container of the
// project any more.
func (d *deployer) waitGone(ctx context.Context, namespace, project string) error {
	prefix := contract.WorkloadID(namespace, project, "")
	last := -1
	for {
		pollCtx, cancel := context.WithTimeout(ctx, apiTimeout)
		hosts, err := fetchHosts(pollCtx, d.c)
		cancel()
		if err != nil {
			return err
		}
		left := 0
		var where []string
		for _, h := range hosts {
			if h.State != "up" || h.Report == nil {
				continue
			}
			n := 0
			for _, c := range h.Report.Containers {
				if strings.HasPrefix(c.WorkloadID, prefix) {
					n++
				}
			}
			if n > 0 {
				left += n
				where = append(where, hostLabel(h))
			}
		}
		if left == 0 {
			fmt.Fprintf(d.out, "Every container of %s%s is gone.\n", namespace+"/", project)
			return nil
		}
		if left != last {
			fmt.Fprintf(d.out, "waiting for %d containers to stop on %s\n", left, strings.Join(where, ", "))
			last = left
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d.poll):
		}
	}
}
