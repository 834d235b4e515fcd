package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/spec"
	"github.com/hatchery/hatchery/internal/termsafe"
)

// hatch volume: a volume's backups and restores (docs/BACKUPS.md). A backup
// or a restore is a task of the control plane that one host does; these
// commands start one and follow it by long-polling its state, as hatch run
// follows a run.

func newVolumeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "volume",
		Short: "Back up a project's volumes, list their backups, restore and forget them",
	}
	cmd.AddCommand(newVolumeBackupCmd(), newVolumeBackupsCmd(), newVolumeRestoreCmd(), newVolumeForgetCmd())
	return cmd
}

func newVolumeBackupCmd() *cobra.Command {
	var (
		flags    projectFlags
		detach   bool
		fromHost string
	)
	cmd := &cobra.Command{
		Use:   "backup PROJECT VOLUME [-n NS] [--detach] [--from-host HOST]",
		Short: "Back up a volume now and follow the backup to its end",
		Long: "Take a backup of the volume now, on its host, with its backup policy's hooks and\n" +
			"consistency (hatch.yaml volumes.<name>.backup; a volume without one is copied while\n" +
			"its egg runs). Its phases are printed as its host reports them, then its size, the\n" +
			"bytes sent (only the chunks the store did not hold), its chunks and how long it\n" +
			"took. Exit 1 if it fails, with why and a failed hook's output. Ctrl-C leaves it\n" +
			"running; --detach prints its ID and returns at once. --from-host backs up the\n" +
			"volume's stale copy on that host instead, the copy a failover left (hatch status\n" +
			"lists them), without hooks: restore that backup to bring back what it held.",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkVolumeArgs(args[0], args[1]); err != nil {
				return err
			}
			return flags.run(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				startCtx, cancel := context.WithTimeout(ctx, apiTimeout)
				task, err := c.Backups().Start(startCtx, flags.namespace, args[0], args[1], fromHost)
				cancel()
				if err != nil {
					return err
				}
				if detach {
					_, err := fmt.Fprintln(cmd.OutOrStdout(), task.ID)
					return err
				}
				return newTaskFollower(c.Backups(), flags.namespace, args[0], cmd).follow(ctx, task)
			})
		},
	}
	flags.register(cmd)
	cmd.Flags().BoolVarP(&detach, "detach", "d", false, "print the backup's ID and return at once")
	cmd.Flags().StringVar(&fromHost, "from-host", "", "back up the volume's stale copy on this host (a name or ID), left there by a failover")
	return cmd
}

func newVolumeBackupsCmd() *cobra.Command {
	var (
		flags  projectFlags
		output string
	)
	cmd := &cobra.Command{
		Use:   "backups PROJECT [VOLUME] [-n NS] [-o table|json]",
		Short: "List a project's backups, newest first",
		Long: "List the project's backups (of VOLUME only, if given), newest first: the ID that\n" +
			"restore --from and forget take (the backup's manifest; a backup that did not end\n" +
			"well has its task's), when it was taken, the volume, the host it was taken on, its\n" +
			"size, the bytes sent, how long it took, its consistency (stop: the egg was stopped\n" +
			"for the copy), its trigger (manual, schedule, missed) and its outcome. Backups\n" +
			"outlive `hatch destroy --volumes` until forgotten or past their volume's keep.",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkName("project", args[0]); err != nil {
				return err
			}
			volume := ""
			if len(args) == 2 {
				if err := checkVolumeArgs(args[0], args[1]); err != nil {
					return err
				}
				volume = args[1]
			}
			if output != "table" && output != "json" {
				return fmt.Errorf("-o %q: write table or json", output)
			}
			return flags.run(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				ctx, cancel := context.WithTimeout(ctx, apiTimeout)
				defer cancel()
				tasks, err := c.Backups().List(ctx, flags.namespace, args[0], volume)
				if err != nil {
					return err
				}
				if output == "json" {
					if tasks == nil {
						tasks = []api.VolumeTask{}
					}
					enc := json.NewEncoder(cmd.OutOrStdout())
					enc.SetIndent("", "  ")
					return enc.Encode(tasks)
				}
				return printBackups(cmd.OutOrStdout(), tasks, time.Now())
			})
		},
	}
	flags.register(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, or json (every field of each backup)")
	return cmd
}

func newVolumeRestoreCmd() *cobra.Command {
	var (
		flags              projectFlags
		from, to, fromHost string
		yes                bool
	)
	cmd := &cobra.Command{
		Use:   "restore PROJECT VOLUME [--from ID | --from-host HOST] [--to NEW] [--yes] [-n NS]",
		Short: "Restore a volume from a backup: planned, confirmed, then followed",
		Long: "Restore the volume from a backup (--from: an ID of hatch volume backups; default:\n" +
			"its latest good one). The plan is shown first (which backup, how old, the host and\n" +
			"the volume written, whether its content is replaced, warnings) and, on a terminal,\n" +
			"confirmed (--yes skips the question, and is needed when there is no terminal). The\n" +
			"volume is refused while a running container mounts it: scale its egg to 0 first\n" +
			"(replicas: 0), or restore beside it with --to NEW, a new volume of that name on\n" +
			"the same host. Every chunk is fetched and verified before the first byte is\n" +
			"written; the volume is then emptied and filled. Exit 1 if it fails.\n\n" +
			"--from-host HOST restores from the volume's stale copy on HOST, the copy a\n" +
			"failover left there: it is backed up first (hatch volume backup --from-host),\n" +
			"then that backup is restored as above.",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkVolumeArgs(args[0], args[1]); err != nil {
				return err
			}
			if to != "" && !spec.ValidKey(to) {
				return fmt.Errorf("--to %q: a volume name is %s", to, spec.KeyRule)
			}
			if from != "" && fromHost != "" {
				return errors.New("--from and --from-host name two sources: give one")
			}
			r := &restorer{in: cmd.InOrStdin(), out: cmd.OutOrStdout(), interactive: isTerminal(cmd.OutOrStdout()) && isTerminal(cmd.InOrStdin()), now: time.Now}
			return flags.run(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				follower := newTaskFollower(c.Backups(), flags.namespace, args[0], cmd)
				if fromHost != "" {
					id, err := backupStaleCopy(ctx, c.Backups(), follower, flags.namespace, args[0], args[1], fromHost)
					if err != nil {
						return err
					}
					from = id
				}
				return r.restore(ctx, c.Backups(), follower, flags.namespace, args[0], args[1], api.RestoreRequest{From: from, To: to}, yes)
			})
		},
	}
	flags.register(cmd)
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "the backup to restore (an ID of hatch volume backups; default: the latest good one)")
	f.StringVar(&to, "to", "", "restore into a new volume of this name beside the volume, which is left as it is")
	f.BoolVarP(&yes, "yes", "y", false, "restore without asking")
	f.StringVar(&fromHost, "from-host", "", "restore from the volume's stale copy on this host (a name or ID), backed up first")
	return cmd
}

// backupStaleCopy backs up the volume's stale copy on host and follows the
// backup to its end; it returns the backup's ID.
func backupStaleCopy(ctx context.Context, b *client.Backups, f *taskFollower, ns, project, volume, host string) (string, error) {
	startCtx, cancel := context.WithTimeout(ctx, apiTimeout)
	task, err := b.Start(startCtx, ns, project, volume, host)
	cancel()
	if err != nil {
		return "", err
	}
	if err := f.follow(ctx, task); err != nil {
		return "", fmt.Errorf("the backup of the stale copy on host %s: %w", host, err)
	}
	return task.ID, nil
}

func newVolumeForgetCmd() *cobra.Command {
	var (
		flags     projectFlags
		staleCopy string
	)
	cmd := &cobra.Command{
		Use:   "forget PROJECT ID [-n NS] | forget PROJECT VOLUME --stale-copy HOST [-n NS]",
		Short: "Forget a backup, or delete a volume's stale copy",
		Long: "Forget a backup (an ID of hatch volume backups). Its chunks that no other backup\n" +
			"holds are deleted by the next collection; this cannot be undone.\n\n" +
			"With --stale-copy HOST, delete the volume's stale copy on HOST: the Docker volume\n" +
			"a failover left on the host it moved the volume from (hatch status lists them).\n" +
			"What it held and the backup did not is gone; hatch volume backup --from-host\n" +
			"saves it first.",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if staleCopy != "" {
				if err := checkVolumeArgs(args[0], args[1]); err != nil {
					return err
				}
				return flags.run(cmd.Context(), func(ctx context.Context, c *client.Client) error {
					ctx, cancel := context.WithTimeout(ctx, apiTimeout)
					defer cancel()
					if err := c.Backups().ForgetStaleCopy(ctx, flags.namespace, args[0], args[1], staleCopy); err != nil {
						return err
					}
					_, err := fmt.Fprintf(cmd.OutOrStdout(), "the stale copy of volume %s of %s/%s on host %s is deleted\n",
						args[1], flags.namespace, args[0], termsafe.Line(staleCopy))
					return err
				})
			}
			if err := checkName("project", args[0]); err != nil {
				return err
			}
			if args[1] == "" {
				return errors.New("give the backup's ID, as hatch volume backups lists it")
			}
			return flags.run(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				ctx, cancel := context.WithTimeout(ctx, apiTimeout)
				defer cancel()
				if err := c.Backups().Forget(ctx, flags.namespace, args[0], args[1]); err != nil {
					return err
				}
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "backup %s of %s/%s is forgotten\n", termsafe.Line(args[1]), flags.namespace, args[0])
				return err
			})
		},
	}
	flags.register(cmd)
	cmd.Flags().StringVar(&staleCopy, "stale-copy", "", "delete the volume's stale copy on this host (a name or ID) instead of a backup")
	return cmd
}

// checkVolumeArgs checks a project and a volume name before any request.
func checkVolumeArgs(project, volume string) error {
	if err := checkName("project", project); err != nil {
		return err
	}
	if !spec.ValidKey(volume) {
		return fmt.Errorf("volume %q: a volume name is %s, as hatch.yaml's volumes: names it", volume, spec.KeyRule)
	}
	return nil
}

// restorer plans a restore, shows the plan, asks, then starts it.
type restorer struct {
	in          io.Reader
	out         io.Writer
	interactive bool
	now         func() time.Time
}

// restore asks for the plan (a dry run), shows it and asks for
// confirmation (unless yes), then sends the request for the backup the plan
// named, so that a backup taken meanwhile does not change what was
// confirmed, and follows the task to its end.
func (r *restorer) restore(ctx context.Context, b *client.Backups, f *taskFollower, ns, project, volume string, req api.RestoreRequest, yes bool) error {
	planCtx, cancel := context.WithTimeout(ctx, apiTimeout)
	plan, err := b.PlanRestore(planCtx, ns, project, volume, req)
	cancel()
	if err != nil {
		return err
	}
	printRestorePlan(r.out, ns, project, volume, plan, r.now())
	if !yes {
		if !r.interactive {
			return errors.New("not a terminal, so nobody can confirm: review the plan above, then run again with --yes")
		}
		ok, err := confirm(r.in, r.out, fmt.Sprintf("Restore %s/%s volume %s?", ns, project, volume))
		if err != nil {
			return err
		}
		if !ok {
			return errNotConfirmed
		}
	}
	if id := backupID(plan.Backup); id != "" {
		req.From = id
	}
	startCtx, cancel := context.WithTimeout(ctx, apiTimeout)
	task, err := b.Restore(startCtx, ns, project, volume, req)
	cancel()
	if err != nil {
		return err
	}
	return f.follow(ctx, task)
}

// printRestorePlan shows what a restore would do.
//
//	Restore of default/shop volume data:
//	  from backup 3f9c… taken 2026-12-02 03:00:04 (5h12m ago) on host h1, 1.2 GB
//	  into volume hatch-default-shop-data on host h1: its content is replaced
//	  warning: ...
func printRestorePlan(w io.Writer, ns, project, volume string, p api.RestorePlan, now time.Time) {
	fmt.Fprintf(w, "Restore of %s/%s volume %s:\n", ns, project, volume)
	at := backupTime(p.Backup)
	when := "at an unknown time"
	if !at.IsZero() {
		when = fmt.Sprintf("taken %s (%s ago)", at.Local().Format(time.DateTime), now.Sub(at).Round(time.Second))
	}
	size := ""
	if p.Backup.Bytes > 0 {
		size = ", " + byteSize(p.Backup.Bytes)
	}
	fmt.Fprintf(w, "  from backup %s %s on host %s%s\n", termsafe.Line(backupID(p.Backup)), when, termsafe.Line(taskHost(p.Backup)), size)
	into := "a new volume"
	if p.Replaces {
		into = "its content is replaced: what is there now is lost"
	}
	host := p.HostName
	if host == "" {
		host = p.Host
	}
	fmt.Fprintf(w, "  into volume %s on host %s: %s\n", termsafe.Line(p.Target), termsafe.Line(orDash(host)), into)
	for _, warning := range p.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", termsafe.Line(warning))
	}
}

// printBackups prints the backups as a table.
//
//	ID          TIME                 VOLUME  HOST  SIZE    SENT    DURATION  CONSISTENCY  TRIGGER   OUTCOME
//	3f9c1a…     2026-12-02 03:00:04  data    h1    1.2 GB  4.1 MB  12s       hooks        schedule  done
func printBackups(w io.Writer, tasks []api.VolumeTask, now time.Time) error {
	if len(tasks) == 0 {
		_, err := fmt.Fprintln(w, "no backups: `hatch volume backup PROJECT VOLUME` takes one; a volume's backup: schedule takes them too")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTIME\tVOLUME\tHOST\tSIZE\tSENT\tDURATION\tCONSISTENCY\tTRIGGER\tOUTCOME")
	for _, t := range tasks {
		at, size, sent, took := "-", "-", "-", "-"
		if ts := backupTime(t); !ts.IsZero() {
			at = ts.Local().Format(time.DateTime)
		}
		if t.Bytes > 0 {
			size = byteSize(t.Bytes)
		}
		if t.SentBytes > 0 || t.State == string(contract.TaskDone) {
			sent = byteSize(t.SentBytes)
		}
		switch {
		case t.Duration() > 0:
			took = t.Duration().Round(100 * time.Millisecond).String()
		case !t.StartedAt.IsZero() && !taskEnded(t.State):
			took = now.Sub(t.StartedAt).Round(time.Second).String() + "…"
		}
		outcome := t.State
		if t.FromStore {
			outcome += " (from the store)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termsafe.Line(backupID(t)), at, termsafe.Line(t.Volume),
			termsafe.Line(taskHost(t)), size, sent, took, orDash(termsafe.Line(t.Consistency)), orDash(termsafe.Line(t.Trigger)), termsafe.Line(outcome))
	}
	return tw.Flush()
}

// backupID is the ID a backup is named by: its manifest once it has one,
// else its task's.
func backupID(t api.VolumeTask) string {
	if t.Manifest != "" {
		return t.Manifest
	}
	return t.ID
}

// backupTime is when a backup was taken: its end (the copy's moment is
// closer to it for a long copy than its start), else its start, else when
// it was asked for.
func backupTime(t api.VolumeTask) time.Time {
	for _, ts := range []time.Time{t.EndedAt, t.StartedAt, t.CreatedAt} {
		if !ts.IsZero() {
			return ts
		}
	}
	return time.Time{}
}

func taskHost(t api.VolumeTask) string {
	switch {
	case t.HostName != "":
		return t.HostName
	case t.Host != "":
		return t.Host
	}
	return "(not placed yet)"
}

// The states of a task that are ends: its host's (done, failed), and the
// control plane's (lost with its host, a tick skipped or missed).
func taskEnded(state string) bool {
	switch state {
	case string(contract.TaskDone), string(contract.TaskFailed), taskLost, taskSkipped, taskMissed:
		return true
	}
	return false
}

// The control plane's own end states of a task (api.VolumeTask.State).
const (
	taskLost    = "lost"
	taskSkipped = "skipped"
	taskMissed  = "missed"
)

// taskWait is each long-poll of a task. It is short because the server
// answers at once only when the state changes, while the phase of a running
// task (before, copy, after...) changes within one state.
const taskWait = 2 * time.Second

// taskFollower prints a task's phases as they change and returns its end
// as the command's.
type taskFollower struct {
	backups     *client.Backups
	ns, project string
	out, errOut io.Writer
	wait        time.Duration
}

func newTaskFollower(b *client.Backups, ns, project string, cmd *cobra.Command) *taskFollower {
	return &taskFollower{backups: b, ns: ns, project: project, out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr(), wait: taskWait}
}

// follow long-polls the task until it ends, printing each new state or
// phase on errOut, then its summary on out. Ctrl-C leaves the task running
// (a copy half done is worth less than one finished) and says how to see it.
func (f *taskFollower) follow(ctx context.Context, t api.VolumeTask) error {
	fmt.Fprintf(f.errOut, "%s %s of volume %s on host %s\n", t.Kind, termsafe.Line(t.ID), termsafe.Line(t.Volume), termsafe.Line(taskHost(t)))
	last := ""
	for {
		if now := progressOf(t); now != last {
			fmt.Fprintf(f.errOut, "  %s\n", termsafe.Line(now))
			last = now
		}
		if taskEnded(t.State) {
			return taskEnd(f.out, t)
		}
		next, err := f.backups.Wait(ctx, f.ns, f.project, t.ID, t.State, f.wait)
		if err != nil {
			if ctx.Err() != nil {
				see := fmt.Sprintf("`hatch volume backups -n %s %s %s` shows how it ends", f.ns, f.project, t.Volume)
				if t.Kind == string(contract.TaskRestore) {
					see = fmt.Sprintf("`hatch events -n %s %s` shows how it ends", f.ns, f.project)
				}
				fmt.Fprintf(f.errOut, "the %s %s goes on: %s\n", t.Kind, t.ID, see)
				return &exitError{code: 130}
			}
			return fmt.Errorf("wait for %s %s: %w", t.Kind, t.ID, err)
		}
		t = next
	}
}

// progressOf is the line a task's state and phase print as.
func progressOf(t api.VolumeTask) string {
	if t.Phase == "" || taskEnded(t.State) {
		return t.State
	}
	return t.State + ": " + t.Phase
}

// taskEnd prints a task's summary and returns its end as the command's:
// nil for done, else an exit code of 1 with why (a failed hook's output
// included, each of its lines made safe to print).
func taskEnd(w io.Writer, t api.VolumeTask) error {
	switch t.State {
	case string(contract.TaskDone):
		took := t.Duration().Round(100 * time.Millisecond)
		if t.Kind == string(contract.TaskRestore) {
			fmt.Fprintf(w, "restored backup %s into volume %s: %s written, in %s\n", termsafe.Line(t.Backup), termsafe.Line(orDash(t.Target)), byteSize(t.Bytes), took)
			return nil
		}
		fmt.Fprintf(w, "backup %s of volume %s: %s, %s sent, %d of %d chunks new, %s stored, in %s\n", termsafe.Line(backupID(t)), termsafe.Line(t.Volume),
			byteSize(t.Bytes), byteSize(t.SentBytes), t.NewChunks, t.Chunks, byteSize(t.StoredBytes), took)
		return nil
	case string(contract.TaskFailed):
		msg := fmt.Sprintf("%s %s of volume %s failed: %s", t.Kind, t.ID, t.Volume, orDash(t.Error))
		if t.Output != "" {
			msg += "\nits hook's output:"
			for _, l := range termsafe.Lines(t.Output) {
				msg += "\n  | " + l
			}
		}
		return &exitError{code: 1, err: errors.New(msg)}
	case taskLost:
		return &exitError{code: 1, err: fmt.Errorf("%s %s was lost with its host %s: how it ended is unknown, and it is not done again", t.Kind, t.ID, taskHost(t))}
	}
	return &exitError{code: 1, err: fmt.Errorf("%s %s ended as %q: %s", t.Kind, t.ID, t.State, orDash(t.Error))}
}
