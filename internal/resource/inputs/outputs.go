package inputs

import "github.com/hatchery/hatchery/internal/resource"

// The outputs a resource reports for its children to reference
// (${egg/db.address}), by name.
const (
	OutputAddress = "address" // an egg's "<egg>:<port>", the name its consumers dial
	OutputHosts   = "hosts"   // an egg's host IDs, sorted
	OutputName    = "name"    // a volume's or network's name in the project file
	OutputHost    = "host"    // a volume's host ID
	OutputHandle  = "handle"  // a secret's handle, written ${secret.<name>}
)

// OutputFailover is kept in a volume's record outputs, not referenced by
// children: what its last failover did (api.VolumeFailover), written by
// the control plane's failover and shown by the plan and hatch status.
const OutputFailover = "failover"

// Outputs returns the outputs a resource of kind k reports, declared here
// once, beside its inputs: the loaders refuse a reference to any other, and
// the kind's provider declares these and reports them. ok is false for a
// kind this package does not know; a kind may have none (a route).
func Outputs(k resource.Kind) (outputs []string, ok bool) {
	switch k {
	case resource.Egg:
		return []string{OutputAddress, OutputHosts}, true
	case resource.Volume:
		return []string{OutputName, OutputHost}, true
	case resource.Network:
		return []string{OutputName}, true
	case resource.Secret:
		return []string{OutputHandle}, true
	case resource.Route:
		return []string{}, true
	}
	return nil, false
}
