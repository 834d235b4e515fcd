package cli

import (
	"context"
	"fmt"
	"math"

	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/placement"
	"github.com/hatchery/hatchery/internal/spec"
	"github.com/hatchery/hatchery/internal/termsafe"
)

// maxCPUFlag bounds --cpus and --max-host-cpus: far above any machine, and
// far below where thousandths of a CPU overflow.
const maxCPUFlag = 1 << 20

// hostCapacityCaps reads hatch server's --max-host-memory and
// --max-host-cpus.
func hostCapacityCaps(memory string, cpus float64) (placement.Resources, error) {
	mem, err := spec.ParseSize(memory)
	if err != nil || mem <= 0 {
		return placement.Resources{}, fmt.Errorf("--max-host-memory: %q is not a size above zero, for example 1Ti or 512Gi", memory)
	}
	milli, err := milliCPUFlag("--max-host-cpus", cpus)
	if err != nil {
		return placement.Resources{}, err
	}
	return placement.Resources{Memory: mem, MilliCPU: milli}, nil
}

// milliCPUFlag reads a number of CPUs (0.5, 16) as thousandths.
func milliCPUFlag(flag string, cpus float64) (int64, error) {
	if math.IsNaN(cpus) || cpus <= 0 || cpus > maxCPUFlag {
		return 0, fmt.Errorf("%s: %v is not a number of CPUs above zero (at most %d), for example 16 or 0.5", flag, cpus, maxCPUFlag)
	}
	return int64(math.Round(cpus * 1000)), nil
}

func newHostsSetCmd() *cobra.Command {
	var af apiFlags
	var memory string
	var cpus float64
	cmd := &cobra.Command{
		Use:   "set NAME [--memory SIZE] [--cpus N]",
		Short: "Pin a host's capacity: placement believes it whatever the host reports",
		Long: "Pin a host's capacity. Placement believes a host's report of its capacity only up\n" +
			"to its first report's and the server's caps (--max-host-memory, --max-host-cpus), so a\n" +
			"host cannot draw every new replica by claiming more. When a host really grew, confirm it\n" +
			"here: from then on placement uses this capacity whatever the host reports. A part left\n" +
			"out keeps what is believed now. `hatch hosts` shows what each host reports and what is believed.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := setCapacityRequest(cmd.Flags().Changed("memory"), memory, cmd.Flags().Changed("cpus"), cpus)
			if err != nil {
				return err
			}
			return af.callAPI(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				h, err := c.Hosts().SetCapacity(ctx, args[0], req)
				if err != nil {
					return err
				}
				believed := placement.Resources{}
				if h.Capacity != nil {
					believed = placement.Resources{Memory: h.Capacity.Believed.MemoryBytes, MilliCPU: h.Capacity.Believed.MilliCPU}
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "host %s (%s): placement now believes %s, whatever the host reports\n",
					termsafe.Line(h.Name), h.ID, believed)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&memory, "memory", "", "the host's memory, for example 64Gi")
	cmd.Flags().Float64Var(&cpus, "cpus", 0, "the host's CPUs, for example 16")
	af.register(cmd)
	return cmd
}

// setCapacityRequest reads hatch hosts set's flags.
func setCapacityRequest(memorySet bool, memory string, cpusSet bool, cpus float64) (api.SetHostCapacity, error) {
	if !memorySet && !cpusSet {
		return api.SetHostCapacity{}, fmt.Errorf("give --memory, --cpus or both, for example hatch hosts set NAME --memory 64Gi --cpus 16")
	}
	var req api.SetHostCapacity
	if memorySet {
		n, err := spec.ParseSize(memory)
		if err != nil || n <= 0 {
			return api.SetHostCapacity{}, fmt.Errorf("--memory: %q is not a size above zero, for example 64Gi", memory)
		}
		req.MemoryBytes = n
	}
	if cpusSet {
		milli, err := milliCPUFlag("--cpus", cpus)
		if err != nil {
			return api.SetHostCapacity{}, err
		}
		req.MilliCPU = milli
	}
	return req, nil
}
