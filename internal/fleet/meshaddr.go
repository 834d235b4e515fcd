package fleet

import (
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
)

// checkMeshAddresses refuses a report whose mesh addresses no peer should
// dial (contract.CheckMeshAddresses; loopback only with
// Config.LoopbackMesh): the control plane hands them to every host, whose
// mesh dials them, so an address taken as sent would let one host point
// every other at a metadata service or at a port on their own machine.
// The whole report is refused (400, naming the address and the rule)
// rather than the address dropped: the agent checks its --advertise
// addresses by the same rule at its start, so only a host out of step or
// lying gets here, and its failed heartbeat, logged by its agent with the
// reason, shows it down in `hatch hosts` instead of up and unreachable.
func (s *Service) checkMeshAddresses(report contract.StatusReport) error {
	if err := contract.CheckMeshAddresses(report.MeshAddresses, s.cfg.LoopbackMesh); err != nil {
		s.log.Warn("status report refused: a mesh address no peer may dial",
			zap.String("host", report.HostID), zap.Error(err))
		return api.BadRequest("mesh_addresses: %v (advertise addresses peers can reach: hatch agent --advertise)", err)
	}
	return nil
}
