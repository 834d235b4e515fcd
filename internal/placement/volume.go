package placement

import (
	"fmt"
	"time"
)

// VolumeChoice is the host a new volume lives on, with the reasons.
type VolumeChoice struct {
	HostID string
	Hosts  []Explanation // as in Decision.Hosts; the chosen host has ReasonPlaced
}

// ChooseVolumeHost picks the host a new volume lives on, once, when the
// volume is created; its consuming egg then follows it there for good. The
// host must be live and satisfy the consumer's constraint (placement.hosts)
// with room for one replica of it. Among those, a host
// the consumer already runs on comes first (so giving an egg a volume does not
// move it), then the least loaded, then the first by name.
//
// consumer's Volume and VolumeHost are ignored. The error wraps
// ErrInvalidInput for malformed input, or is an *UnplaceableError.
func (s *Scheduler) ChooseVolumeHost(volume string, consumer Egg, hosts []Host, now time.Time) (VolumeChoice, error) {
	runs := consumer.Current
	consumer.Volume, consumer.VolumeHost, consumer.Current = "", "", nil
	if err := validate(&consumer, hosts); err != nil {
		return VolumeChoice{}, err
	}
	for id, n := range runs {
		if n < 0 {
			return VolumeChoice{}, fmt.Errorf("%w: egg %s: %d slots on host %s is negative", ErrInvalidInput, consumer.Name, n, id)
		}
	}
	if volume == "" {
		return VolumeChoice{}, fmt.Errorf("%w: volume has no name", ErrInvalidInput)
	}
	pl := s.survey(&consumer, hosts, now)
	var best *hostPlan
	var bestLoad float64
	for _, p := range pl.hosts {
		if p.status != statusLive || p.excluded != "" || p.fit < 1 {
			continue
		}
		load := p.load(consumer.PerReplica, 1)
		if best == nil || runs[p.id] > runs[best.id] || runs[p.id] == runs[best.id] && load < bestLoad {
			best, bestLoad = p, load
		}
	}
	if best == nil {
		err := pl.unplaceable()
		err.msg = fmt.Sprintf("volume %s has no host: %s", volume, err.msg)
		return VolumeChoice{}, err
	}
	choice := VolumeChoice{HostID: best.id, Hosts: pl.explanations()}
	why := "least loaded"
	if runs[best.id] > 0 {
		why = consumer.Name + " runs there now"
	}
	best.added = 1 // to show the load with the consumer on it
	for i := range choice.Hosts {
		if choice.Hosts[i].HostID == best.id {
			choice.Hosts[i].Reason = ReasonPlaced
			choice.Hosts[i].Detail = fmt.Sprintf("chosen for volume %s (%s), live, %s with %s",
				volume, why, loadText(best, consumer.PerReplica), consumer.Name)
		}
	}
	return choice, nil
}
