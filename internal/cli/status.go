package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/apiclient"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/termsafe"
)

func newStatusCmd() *cobra.Command {
	var flags projectFlags
	cmd := &cobra.Command{
		Use:   "status [PROJECT]",
		Short: "Show each egg: replicas ready/desired, hosts, rollout state, restarts and crash loops",
		Long: "Show where each egg of a project stands: its replicas ready at its current spec\n" +
			"over those desired, the hosts running it, its rollout (done, rolling, waiting,\n" +
			"failed), restarts and crash loops. Without PROJECT, every project (of the namespace\n" +
			"given with -n, or of every namespace).",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			allNamespaces := !cmd.Flags().Changed("namespace")
			return flags.run(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				ctx, cancel := context.WithTimeout(ctx, apiTimeout)
				defer cancel()
				var statuses []api.ProjectStatus
				var err error
				if len(args) == 1 {
					statuses, err = oneProject(ctx, c, flags.namespace, args[0])
				} else {
					statuses, err = allProjects(ctx, c, flags.namespace, allNamespaces)
				}
				var eggs []eggStatus
				for _, s := range statuses {
					eggs = append(eggs, eggStatuses(s)...)
				}
				if err != nil {
					return err
				}
				if err := printStatus(cmd.OutOrStdout(), eggs); err != nil {
					return err
				}
				if err := showSchedules(ctx, c, cmd.OutOrStdout(), eggs); err != nil {
					return err
				}
				if err := printVolumes(cmd.OutOrStdout(), statuses, time.Now()); err != nil {
					return err
				}
				certs, err := c.Certificates().List(ctx)
				var apiErr *apiclient.APIError
				switch {
				case errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusNotFound:
					certs, err = nil, nil // a server from before HTTPS: no certificates
				case errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusForbidden:
					// A deploy token: the list spans every project's hostnames,
					// so it reads its project's eggs only.
					certs, err = nil, nil
				}
				if err != nil {
					return err
				}
				return printCertificates(cmd.OutOrStdout(), certs, time.Now())
			})
		},
	}
	flags.register(cmd)
	return cmd
}

func oneProject(ctx context.Context, c *client.Client, namespace, project string) ([]api.ProjectStatus, error) {
	if err := checkName("project", project); err != nil {
		return nil, err
	}
	s, ok, err := c.Projects().Status(ctx, namespace, project)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("no project %s/%s on this server: `hatch status` lists every project; deploy it with `hatch apply`", namespace, project)
	}
	return []api.ProjectStatus{s}, nil
}

// allProjects is the status of every project of the namespace (or of every
// namespace), one project after the other; a project gone since the list
// was read is left out.
func allProjects(ctx context.Context, c *client.Client, namespace string, allNamespaces bool) ([]api.ProjectStatus, error) {
	projects, err := c.Projects().List(ctx)
	if err != nil {
		return nil, err
	}
	var out []api.ProjectStatus
	for _, p := range projects {
		if !allNamespaces && p.Namespace != namespace {
			continue
		}
		s, ok, err := c.Projects().Status(ctx, p.Namespace, p.Name)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// printStatus prints one table per project, then the problems its hosts
// report, once each.
//
//	default/demo
//	  EGG  READY  ROLLOUT  HOSTS  RESTARTS  NOTES
//	  kv   1/1    done     local  0
//	  problems reported by its hosts:
//	    local: write desired-state cache: no space left on device
func printStatus(w io.Writer, eggs []eggStatus) error {
	if len(eggs) == 0 {
		_, err := fmt.Fprintln(w, "no eggs deployed: `hatch apply -f hatch.yaml` deploys a project")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	project := ""
	var problems []string
	for _, e := range eggs {
		if p := resource.Project(e.Namespace, e.Project); p != project {
			if project != "" {
				printProblems(tw, problems)
				problems = nil
				fmt.Fprintln(tw)
			}
			project = p
			fmt.Fprintln(tw, p)
			fmt.Fprintln(tw, "  EGG\tREADY\tROLLOUT\tHOSTS\tRESTARTS\tNOTES")
		}
		problems = append(problems, e.HostErrors...)
		hosts := strings.Join(e.Hosts, ",")
		if hosts == "" {
			hosts = "-"
		}
		fmt.Fprintf(tw, "  %s\t%d/%d\t%s\t%s\t%d\t%s\n", e.Egg, e.Ready, e.Desired, e.State, hosts, e.Restarts, statusNotes(e))
	}
	printProblems(tw, problems)
	return tw.Flush()
}

// showSchedules prints the schedules of the projects shown, each with its
// next run; a server from before jobs (404) has none.
func showSchedules(ctx context.Context, c *client.Client, w io.Writer, eggs []eggStatus) error {
	var shown []string
	for _, e := range eggs {
		if p := resource.Project(e.Namespace, e.Project); !slices.Contains(shown, p) {
			shown = append(shown, p)
		}
	}
	byProject := map[string][]api.Schedule{}
	for _, p := range shown {
		ns, name, _ := strings.Cut(p, "/")
		scheds, err := c.Runs().Schedules(ctx, ns, name)
		var apiErr *apiclient.APIError
		if errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusNotFound {
			continue
		}
		if err != nil {
			return err
		}
		byProject[p] = scheds
	}
	return printSchedules(w, shown, byProject, time.Now())
}

// printSchedules prints one table of the scheduled eggs of each project
// that has any, in the order of projects.
//
//	default/shop schedules
//	  EGG     SCHEDULE   NEXT RUN                      LAST RUN
//	  report  every 15m  2026-12-02 14:15:00 (in 3m)   7f3a09c2e1d4b5a6
func printSchedules(w io.Writer, projects []string, byProject map[string][]api.Schedule, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, p := range projects {
		scheds := byProject[p]
		if len(scheds) == 0 {
			continue
		}
		fmt.Fprintf(tw, "\n%s schedules\n", p)
		fmt.Fprintln(tw, "  EGG\tSCHEDULE\tNEXT RUN\tLAST RUN")
		for _, s := range scheds {
			next := "-"
			switch {
			case s.Paused:
				next = "paused (hatch schedule resume)"
			case !s.Next.IsZero():
				next = fmt.Sprintf("%s (in %s)", s.Next.Local().Format(time.DateTime), max(s.Next.Sub(now), 0).Round(time.Second))
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", termsafe.Line(s.Egg), termsafe.Line(s.Spec), next, orDash(termsafe.Line(s.LastRun)))
		}
	}
	return tw.Flush()
}

// printVolumes prints one table of the volumes of each project that has
// any: their last good backup, their newest ended backup's outcome, their
// next scheduled backup, and below the table each warning, so that a
// backup failing or falling behind is seen.
//
//	default/shop volumes
//	  VOLUME  LAST GOOD BACKUP              LAST OUTCOME  SCHEDULE   NEXT
//	  data    2026-12-02 11:00:00 (3h ago)  failed        every 1h   2026-12-02 15:00:00 (in 12m)
//	  warning: data: last backup failed at 2026-12-02T13:00:00Z: before hook exited 1
func printVolumes(w io.Writer, statuses []api.ProjectStatus, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, s := range statuses {
		if len(s.Volumes) == 0 {
			continue
		}
		fmt.Fprintf(tw, "\n%s volumes\n", resource.Project(s.Namespace, s.Project))
		fmt.Fprintln(tw, "  VOLUME\tLAST GOOD BACKUP\tLAST OUTCOME\tSCHEDULE\tNEXT")
		var warnings []string
		for _, v := range s.Volumes {
			good, next := "never", "-"
			if v.LastGood != nil {
				good = fmt.Sprintf("%s (%s ago)", v.LastGood.Local().Format(time.DateTime), max(now.Sub(*v.LastGood), 0).Round(time.Second))
			}
			if v.NextScheduled != nil {
				next = fmt.Sprintf("%s (in %s)", v.NextScheduled.Local().Format(time.DateTime), max(v.NextScheduled.Sub(now), 0).Round(time.Second))
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", termsafe.Line(v.Name), good, orDash(termsafe.Line(v.LastOutcome)),
				orDash(termsafe.Line(v.Schedule)), next)
			if v.Warning != "" {
				warnings = append(warnings, termsafe.Line(v.Name)+": "+termsafe.Line(v.Warning))
			}
			warnings = append(warnings, failoverLines(v)...)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, line := range warnings {
			fmt.Fprintln(w, "  warning: "+line)
		}
	}
	return tw.Flush()
}

// failoverLines say where a failed-over volume runs now and how much data
// its failover may have lost, and where its stale copies wait.
func failoverLines(v api.VolumeBackupState) []string {
	var out []string
	name := termsafe.Line(v.Name)
	if f := v.Failover; f != nil {
		out = append(out, fmt.Sprintf("%s: failed over at %s from host %s to host %s, restored from backup %s taken %s: up to %s of writes are lost",
			name, f.At.Local().Format(time.DateTime), termsafe.Line(f.FromName), termsafe.Line(f.ToName), shortID(f.Backup),
			f.BackupCreated.Local().Format(time.DateTime), termsafe.Line(f.DataWindow)))
	}
	for _, c := range v.StaleCopies {
		state := "not heard since"
		if c.Found != nil {
			state = "back since " + c.Found.Local().Format(time.DateTime) + ", not started"
		}
		out = append(out, fmt.Sprintf("%s: stale copy %s on host %s (%s; hatch volume forget PROJECT %s --stale-copy %s deletes it)",
			name, termsafe.Line(c.DockerName), termsafe.Line(c.HostName), state, name, termsafe.Line(c.HostName)))
	}
	return out
}

// printCertificates prints each hostname served over HTTPS: where its
// certificate comes from, its issuer and expiry, and the ACME client's last
// error (the current certificate keeps serving meanwhile).
func printCertificates(w io.Writer, certs []api.Certificate, now time.Time) error {
	if len(certs) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\ncertificates")
	fmt.Fprintln(tw, "  HOST\tSOURCE\tISSUER\tEXPIRES\tLAST ERROR")
	for _, c := range certs {
		issuer, expires := "-", "none yet"
		if !c.NotAfter.IsZero() {
			issuer = termsafe.Line(c.Issuer)
			expires = c.NotAfter.UTC().Format(time.RFC3339) + " (in " + c.NotAfter.Sub(now).Round(time.Second).String() + ")"
		}
		lastErr := "-"
		if c.LastError != "" {
			lastErr = termsafe.Line(c.LastError)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", c.Host, c.Source, issuer, expires, lastErr)
	}
	return tw.Flush()
}

// printProblems prints, below a project's table, what its hosts report
// wrong, each line once.
func printProblems(w io.Writer, problems []string) {
	if len(problems) == 0 {
		return
	}
	slices.Sort(problems)
	fmt.Fprintln(w, "  problems reported by its hosts:")
	for _, p := range slices.Compact(problems) {
		fmt.Fprintln(w, "    "+termsafe.Line(p))
	}
}

// statusNotes is an egg's NOTES cell. Its reason and log line come from a
// host, and the log line from a container: shown with termsafe.Line, they
// can neither act on the terminal nor break the table.
func statusNotes(e eggStatus) string {
	var notes []string
	if e.Desired == 0 && e.State == rolloutDone {
		notes = append(notes, "cold (0 replicas)")
	}
	if e.Previous > 0 && e.State != rolloutDone {
		notes = append(notes, fmt.Sprintf("%d of an older spec running", e.Previous))
	}
	if e.CrashLooping > 0 {
		notes = append(notes, fmt.Sprintf("%d crash-looping", e.CrashLooping))
	}
	if e.Detail != "" {
		notes = append(notes, termsafe.Line(e.Detail))
	}
	if e.State == rolloutFailed && len(e.LogTail) > 0 {
		notes = append(notes, "last log line: "+termsafe.Line(e.LogTail[len(e.LogTail)-1]))
	}
	return strings.Join(notes, "; ")
}
