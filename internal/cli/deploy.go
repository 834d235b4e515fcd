package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/apiclient"
	"github.com/hatchery/hatchery/internal/buildctx"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/spec"
	"github.com/hatchery/hatchery/internal/termsafe"
)

// deployer is the client side of a deploy, shared by apply, destroy and up:
// it prepares a plan request from a project (packing and uploading build
// contexts, reading secret values), shows the api.Plan, asks, applies it while
// printing each resource as it lands, and follows the eggs' rollouts.
type deployer struct {
	c   *client.Client
	out io.Writer
	in  io.Reader
	// terminal: out is a terminal, so progress redraws in place.
	// interactive: a person can answer a question (in and out are terminals).
	terminal, interactive bool
	// poll is how often rollouts are checked; noHostGrace is how long
	// following waits for a host to be up before saying that none is.
	poll        time.Duration
	noHostGrace time.Duration
}

// deployOptions are the flags a deploy honours.
type deployOptions struct {
	namespace string
	// yes skips the question; without it a deploy with no person to ask stops.
	yes bool
	// noWait returns once the plan is applied, without following rollouts.
	noWait bool
}

// errApplyFailed marks an apply or a rollout that failed: the command exits
// 1 with the reason already printed.
var errApplyFailed = errors.New("failed")

// prepare turns a loaded project into a plan request: each build context is
// packed and uploaded unless the server has it, and each secret's value is
// read. It returns the request and the project's egg names.
func (d *deployer) prepare(ctx context.Context, p *spec.Project) (api.PlanRequest, []string, error) {
	resources, deps := p.Resources()
	sources, err := d.uploadContexts(ctx, p)
	if err != nil {
		return api.PlanRequest{}, nil, err
	}
	var eggs []string
	for _, r := range resources {
		if r.Type == "egg" {
			r.Source = sources[r.Name]
			eggs = append(eggs, r.Name)
		}
	}
	secrets, err := readSecrets(p)
	if err != nil {
		return api.PlanRequest{}, nil, err
	}
	req := client.NewPlanRequest(resources, deps, secrets)
	req.Notify = p.Notify
	return req, eggs, nil
}

// uploadContexts packs each distinct build context once and uploads it if
// the server lacks it; it returns each built egg's blob digest.
func (d *deployer) uploadContexts(ctx context.Context, p *spec.Project) (map[string]string, error) {
	type context struct{ dir, dockerfile string }
	digests := map[context]string{}
	out := map[string]string{}
	for _, e := range p.Eggs {
		if e.Build == nil {
			continue
		}
		c := context{dir: p.Path(e.Build.Context), dockerfile: e.Build.Dockerfile}
		if digest, ok := digests[c]; ok {
			out[e.Name] = digest
			continue
		}
		digest, err := d.upload(ctx, e.Name, c.dir, c.dockerfile)
		if err != nil {
			return nil, err
		}
		digests[c], out[e.Name] = digest, digest
	}
	return out, nil
}

func (d *deployer) upload(ctx context.Context, egg, dir, dockerfile string) (string, error) {
	archive, err := buildctx.Pack(dir, dockerfile, "")
	if err != nil {
		return "", fmt.Errorf("egg %s: %w", egg, err)
	}
	defer os.Remove(archive.Path)
	has, err := d.c.Blobs().Has(ctx, archive.Digest)
	if err != nil {
		return "", err
	}
	if has {
		fmt.Fprintf(d.out, "%s: build context %s unchanged, already on the server\n", egg, byteSize(archive.Size))
		return archive.Digest, nil
	}
	start := time.Now()
	if err := d.c.Blobs().Put(ctx, archive.Digest, archive.Path); err != nil {
		return "", fmt.Errorf("upload the build context of %s: %w", egg, err)
	}
	fmt.Fprintf(d.out, "%s: build context %s uploaded in %s\n", egg, byteSize(archive.Size), time.Since(start).Round(time.Millisecond))
	return archive.Digest, nil
}

// readSecrets reads every secret's value from its file or variable. The
// values go only into the plan request, over TLS, and are never printed.
func readSecrets(p *spec.Project) (map[string]string, error) {
	values := make(map[string]string, len(p.Secrets))
	for _, s := range p.Secrets {
		switch {
		case s.File != "":
			data, err := os.ReadFile(p.Path(s.File))
			if err != nil {
				return nil, fmt.Errorf("secret %s: %w: check the path in %s", s.Name, err, p.File)
			}
			values[s.Name] = string(data)
		case s.Env != "":
			v, ok := os.LookupEnv(s.Env)
			if !ok {
				return nil, fmt.Errorf("secret %s: $%s is not set: export it before deploying", s.Name, s.Env)
			}
			values[s.Name] = v
		}
	}
	return values, nil
}

// deploy plans the project, shows the api.Plan, asks (unless opts.yes), applies
// it and, unless opts.noWait, follows the rollouts until every egg is ready
// or one fails.
func (d *deployer) deploy(ctx context.Context, p *spec.Project, opts deployOptions) error {
	req, eggs, err := d.prepare(ctx, p)
	if err != nil {
		return err
	}
	pl, err := d.c.Projects().Plan(ctx, opts.namespace, p.Name, req)
	if err != nil {
		return err
	}
	printPlan(d.out, opts.namespace+"/"+p.Name, pl)
	if !pl.HasChanges {
		fmt.Fprintf(d.out, "No changes: %s/%s is as the file says.\n", opts.namespace, p.Name)
	} else if err := d.applyPlan(ctx, opts, p.Name, pl, "Apply"); err != nil {
		return err
	}
	if opts.noWait {
		fmt.Fprintf(d.out, "Not waiting for the rollouts: `%s` shows them.\n", statusCommand(opts.namespace, p.Name))
		return nil
	}
	return d.waitRollouts(ctx, opts.namespace, p.Name, eggs)
}

// statusCommand is the command that shows a project's status, with the
// namespace it was given unless it is the default one.
func statusCommand(namespace, project string) string {
	if namespace == defaultNamespace {
		return "hatch status " + project
	}
	return "hatch status -n " + namespace + " " + project
}

// applyPlan asks for confirmation, applies the plan and prints its progress.
func (d *deployer) applyPlan(ctx context.Context, opts deployOptions, project string, pl api.Plan, verb string) error {
	if !opts.yes {
		if !d.interactive {
			return fmt.Errorf("not a terminal, so nobody can confirm: review the plan above, then run again with --yes")
		}
		ok, err := confirm(d.in, d.out, fmt.Sprintf("%s these changes to %s/%s?", verb, opts.namespace, project))
		if err != nil {
			return err
		}
		if !ok {
			return errNotConfirmed
		}
	}
	id, err := d.c.Projects().Apply(ctx, opts.namespace, project, pl.ID)
	if err != nil && ctx.Err() == nil && outcomeUnknown(err) {
		return fmt.Errorf("%w\nNo server answered the apply request, so whether the apply was recorded is not known: "+
			"`hatch history -n %s %s` lists the applies recorded, and running this again plans from what is there "+
			"(no changes, if the apply went through)", err, opts.namespace, project)
	}
	if err != nil {
		return err
	}
	// The server retries a failed step: each repeat of the same failure
	// would say nothing new.
	lastLine := map[string]string{}
	final, err := d.c.Projects().FollowApply(ctx, opts.namespace, project, id, func(s api.Progress) {
		line := stepLine(s)
		if line == "" || lastLine[s.Resource] == line {
			return
		}
		lastLine[s.Resource] = line
		fmt.Fprintln(d.out, line)
	})
	if ctx.Err() != nil {
		fmt.Fprintf(d.out, "Stopped following: the apply goes on on the server; `%s` shows where it stands.\n", statusCommand(opts.namespace, project))
		return ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("the apply was recorded, but following it stopped: %w; it goes on on the server, "+
			"and `hatch history -n %s %s` shows how it ends", err, opts.namespace, project)
	}
	if final.Outcome != "succeeded" {
		fmt.Fprintf(d.out, "Apply failed: %s\n", termsafe.Line(final.Message))
		return errApplyFailed
	}
	fmt.Fprintf(d.out, "Applied: %s.\n", termsafe.Line(final.Message))
	return nil
}

// outcomeUnknown reports whether a request that failed with err may still
// have been carried out: no server answered it (refused, cut, timed out on
// the way), or the one that did gave up waiting on its own work.
func outcomeUnknown(err error) bool {
	var answered *apiclient.APIError
	return !errors.As(err, &answered) || answered.Code == string(api.CodeTimeout)
}

// stepLine is how an apply step is shown: a line per resource as it lands,
// as it fails, and as it waits for a condition ("" for steps not worth one).
// A step's message may quote a host's report: it is shown with termsafe.Line.
func stepLine(s api.Progress) string {
	if s.Resource == "" {
		return ""
	}
	switch s.Status {
	case "done":
		switch s.Action {
		case "create":
			return "  + " + s.Resource + " created"
		case "update":
			return "  ~ " + s.Resource + " updated"
		case "delete":
			return "  - " + s.Resource + " deleted"
		}
		return "  ✓ " + s.Resource + " " + s.Action
	case "failed":
		return fmt.Sprintf("  ✗ %s: %s failed: %s", s.Resource, s.Action, termsafe.Line(s.Message))
	case "waiting":
		return fmt.Sprintf("  … %s: %s", s.Resource, termsafe.Line(s.Message))
	}
	return ""
}

// waitRollouts shows the eggs' progress until every one is ready at its
// new spec (nil), one fails (the reason and the failing container's last
// log lines, then errApplyFailed) or ctx ends. The control plane being
// unreachable for a while is shown and waited out.
func (d *deployer) waitRollouts(ctx context.Context, namespace, project string, eggs []string) error {
	view := newProgressView(d.out, d.terminal)
	var failingSince, noHostSince time.Time
	for {
		pollCtx, cancel := context.WithTimeout(ctx, apiTimeout)
		status, hostsUp, err := projectEggs(pollCtx, d.c, namespace, project)
		cancel()
		if err == nil && hostsUp > 0 {
			noHostSince = time.Time{}
		} else if err == nil && noHostSince.IsZero() {
			noHostSince = time.Now()
		}
		switch {
		case err != nil && ctx.Err() != nil:
			fmt.Fprintf(d.out, "Stopped following: the rollouts go on; `%s` shows them.\n", statusCommand(namespace, project))
			return ctx.Err()
		case err != nil:
			// The outage is shown as it starts, not after a minute of
			// silence: the rollouts go on on the hosts meanwhile.
			if failingSince.IsZero() {
				failingSince = time.Now()
				fmt.Fprintf(d.out, "  … the control plane does not answer (%s); still following\n", termsafe.Line(err.Error()))
			}
			if time.Since(failingSince) > time.Minute {
				return fmt.Errorf("following the rollouts: no answer for a minute: %w; the rollouts go on on the hosts, "+
					"and `%s` shows them once a server answers", err, statusCommand(namespace, project))
			}
		default:
			if !failingSince.IsZero() {
				fmt.Fprintf(d.out, "  … the control plane answers again after %s\n", time.Since(failingSince).Round(time.Second))
			}
			failingSince = time.Time{}
			progress := rolloutProgress(status, eggs)
			view.Show(progress)
			if failed := failedEggs(status, eggs); len(failed) > 0 {
				for _, e := range failed {
					printFailure(d.out, e)
				}
				return errApplyFailed
			}
			if allDone(progress) {
				fmt.Fprintf(d.out, "%s/%s is ready: %s.\n", namespace, project, readyList(progress))
				return nil
			}
			// A host may be restarting; none for a while is a fleet to fix.
			if !noHostSince.IsZero() && time.Since(noHostSince) >= d.noHostGrace {
				return errors.New("no host is up to run the eggs: start an agent on a Docker host (`hatch agent --server URL " +
					"--join TOKEN`, a token from `hatch token create --join`), and the rollouts go on")
			}
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(d.out, "Stopped following: the rollouts go on; `%s` shows them.\n", statusCommand(namespace, project))
			return ctx.Err()
		case <-time.After(d.poll):
		}
	}
}

// rolloutProgress picks the project's eggs out of the status, in the
// file's order; an egg not deployed anywhere yet is waiting.
func rolloutProgress(status []eggStatus, eggs []string) []eggProgress {
	out := make([]eggProgress, 0, len(eggs))
	for _, name := range eggs {
		p := eggProgress{Name: name, State: rolloutWaiting, Detail: "not deployed yet"}
		if i := slices.IndexFunc(status, func(e eggStatus) bool { return e.Egg == name }); i >= 0 {
			e := status[i]
			p = eggProgress{Name: name, Healthy: e.Ready, Desired: e.Desired, State: e.State, Detail: e.Detail}
			if p.Detail == "" && len(e.Hosts) > 0 && e.State != rolloutDone {
				p.Detail = "on " + strings.Join(e.Hosts, ", ")
			}
		}
		out = append(out, p)
	}
	return out
}

func failedEggs(status []eggStatus, eggs []string) []eggStatus {
	var out []eggStatus
	for _, e := range status {
		if e.State == rolloutFailed && slices.Contains(eggs, e.Egg) {
			out = append(out, e)
		}
	}
	return out
}

func allDone(progress []eggProgress) bool {
	for _, p := range progress {
		if p.State != rolloutDone {
			return false
		}
	}
	return true
}

func readyList(progress []eggProgress) string {
	parts := make([]string, len(progress))
	for i, p := range progress {
		parts[i] = fmt.Sprintf("%s %d/%d", p.Name, p.Healthy, p.Desired)
	}
	return strings.Join(parts, ", ")
}

// printFailure says why an egg's rollout failed, with its failing
// container's last log lines: the container wrote them, so they are shown
// with termsafe (escape sequences visible, never acted on), each line of
// them behind the gutter.
func printFailure(w io.Writer, e eggStatus) {
	fmt.Fprintf(w, "The rollout of %s failed %s\n", e.Egg, termsafe.Line(e.Detail))
	if len(e.LogTail) > 0 {
		fmt.Fprintf(w, "Its last log lines:\n")
		for _, l := range e.LogTail {
			for _, part := range termsafe.Lines(l) {
				fmt.Fprintf(w, "  | %s\n", part)
			}
		}
	}
	fmt.Fprintf(w, "Fix it and apply again, or roll it again as it is with `hatch rollout restart %s/%s`.\n", e.Project, e.Egg)
}

// byteSize formats a size for people: 9.1 MB.
func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f kB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
