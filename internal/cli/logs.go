package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/coder/websocket"
	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/termsafe"
)

func newLogsCmd() *cobra.Command {
	var (
		flags  projectFlags
		follow bool
		since  string
		tail   int
		host   string
		run    string
	)
	cmd := &cobra.Command{
		Use:   "logs PROJECT [EGG[/SLOT]] [-f] [--since 10m] [--tail N] [--host H] [--run ID]",
		Short: "Show the output of a project's containers, merged across replicas and hosts",
		Long: "Show what the project's containers wrote on stdout and stderr, each line prefixed with\n" +
			"its egg, slot and host, in time order. With -f, follow: lines are shown as they come,\n" +
			"replicas a roll starts are followed too, and one that stops says so. Control characters\n" +
			"a container writes are shown, never acted on by the terminal. With --run ID, the output of\n" +
			"one run of the egg (hatch runs lists them; an ended run's while its container is kept);\n" +
			"following, it ends when the run's container does.",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkName("project", args[0]); err != nil {
				return err
			}
			q := url.Values{}
			if len(args) == 2 {
				egg, slot, err := splitEggSlot(args[1])
				if err != nil {
					return err
				}
				q.Set("egg", egg)
				if slot >= 0 {
					q.Set("slot", strconv.Itoa(slot))
				}
			}
			if follow {
				q.Set("follow", "1")
			}
			if since != "" {
				q.Set("since", since)
			}
			if tail >= 0 {
				q.Set("tail", strconv.Itoa(tail))
			}
			if host != "" {
				q.Set("host", host)
			}
			if run != "" {
				if !q.Has("egg") || q.Has("slot") {
					return fmt.Errorf("--run %s: name the run's egg, without a slot (hatch logs PROJECT EGG --run ID)", run)
				}
				q.Set("run", run)
			}
			return flags.run(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				names := hostNames(ctx, c)
				conn, err := c.Sessions().Logs(ctx, flags.namespace, args[0], q)
				if err != nil {
					return err
				}
				defer conn.CloseNow()
				p := &logPrinter{out: cmd.OutOrStdout(), color: isTerminal(cmd.OutOrStdout()), hosts: names}
				return readLogs(ctx, conn, p, follow)
			})
		},
	}
	flags.register(cmd)
	f := cmd.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "keep following: new lines, and new replicas as they start")
	f.StringVar(&since, "since", "", "only lines written since then: a duration back (10m) or a time (RFC 3339)")
	f.IntVar(&tail, "tail", -1, "only each container's last N lines (default: all)")
	f.StringVar(&host, "host", "", "only this host's containers (its name or ID)")
	f.StringVar(&run, "run", "", "the output of this run of the egg instead of its replicas' (hatch runs lists them)")
	return cmd
}

// splitEggSlot reads "EGG" or "EGG/SLOT"; the slot is -1 when not given.
func splitEggSlot(arg string) (string, int, error) {
	egg, slotText, hasSlot := strings.Cut(arg, "/")
	if egg == "" {
		return "", 0, fmt.Errorf("%q: name the egg as EGG or EGG/SLOT, for example web or web/2", arg)
	}
	if !hasSlot {
		return egg, -1, nil
	}
	slot, err := strconv.Atoi(slotText)
	if err != nil || slot < 0 {
		return "", 0, fmt.Errorf("%q: the slot after / is a replica's number (0, 1, ...), for example web/2", arg)
	}
	return egg, slot, nil
}

// hostNames maps host IDs to names for the prefixes; without it IDs show.
func hostNames(ctx context.Context, c *client.Client) map[string]string {
	hosts, err := c.Hosts().List(ctx)
	out := map[string]string{}
	if err != nil {
		return out
	}
	for _, h := range hosts {
		out[h.ID] = cmp.Or(h.Name, h.ID)
	}
	return out
}

// readLogs prints the stream's records: as they come when following, else
// all of them at the end in time order (each container's in its own order:
// the sort is stable and Docker's timestamps never go back).
func readLogs(ctx context.Context, conn *websocket.Conn, p *logPrinter, follow bool) error {
	conn.SetReadLimit(1 << 20)
	var all []contract.LogRecord
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			if !follow {
				slices.SortStableFunc(all, func(a, b contract.LogRecord) int { return a.Time.Compare(b.Time) })
				for _, r := range all {
					p.print(r)
				}
			}
			return streamEnd(ctx, err)
		}
		var r contract.LogRecord
		if json.Unmarshal(data, &r) != nil {
			continue
		}
		if follow {
			p.print(r)
		} else {
			all = append(all, r)
		}
	}
}

// streamEnd is what a stream's end means for the command: a normal close
// is success, Ctrl-C exits 130, any other close says its reason.
func streamEnd(ctx context.Context, err error) error {
	switch {
	case websocket.CloseStatus(err) == websocket.StatusNormalClosure:
		return nil
	case ctx.Err() != nil:
		return &exitError{code: 130}
	}
	var ce websocket.CloseError
	if errors.As(err, &ce) && ce.Reason != "" {
		return errors.New(ce.Reason)
	}
	return fmt.Errorf("the stream ended: %w", err)
}

// logPrinter writes records as lines: "egg/slot host | text".
type logPrinter struct {
	out   io.Writer
	color bool
	hosts map[string]string
}

// palette is the prefixes' colours on a terminal (ANSI foregrounds).
var palette = []int{31, 32, 33, 34, 35, 36, 91, 92, 93, 94, 95, 96}

func (p *logPrinter) print(r contract.LogRecord) {
	// Every field comes from a host: each goes through termsafe, the
	// container's too (a host's escape sequence must not reach the
	// terminal). The server's own records name no host.
	host := cmp.Or(p.hosts[r.Host], r.Host, "server")
	prefix := fmt.Sprintf("%s/%d %s", r.Egg, r.Slot, host)
	if r.Egg == "" {
		prefix = host
	}
	prefix = termsafe.Line(prefix)
	if p.color {
		h := fnv.New32a()
		h.Write([]byte(prefix))
		prefix = fmt.Sprintf("\x1b[%dm%s\x1b[0m", palette[h.Sum32()%uint32(len(palette))], prefix)
	}
	var text string
	switch r.Event {
	case "started":
		text = "-- replica started (container " + termsafe.Line(shortID(r.Container)) + ")"
	case "stopped":
		text = "-- replica stopped (container " + termsafe.Line(shortID(r.Container)) + ")"
	case "":
		text = termsafe.Line(r.Line)
		if r.Stream == "stderr" && !p.color {
			text = "[stderr] " + text
		}
	default:
		text = "-- " + termsafe.Line(r.Event+": "+r.Line)
	}
	fmt.Fprintf(p.out, "%s | %s\n", prefix, text)
}

func shortID(id string) string { return id[:min(len(id), 12)] }
