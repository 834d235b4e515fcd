package store

import (
	"context"
	"time"
)

// EventHostCapacityPinned: an admin set a host's capacity (`hatch hosts
// set`), which placement believes from then on whatever the host reports.
const EventHostCapacityPinned EventType = "host.capacity_pinned"

// Capacity is a host's memory in bytes and CPU in thousandths of a CPU.
type Capacity struct {
	Memory   int64
	MilliCPU int64
}

// IsZero reports whether c says nothing.
func (c Capacity) IsZero() bool { return c == Capacity{} }

// HostCapacity is what the control plane holds of a host's capacity beside
// its reports. A host's report says what it offers, and a host that lies
// about it would draw every new replica (and their secrets), so a report is
// not believed beyond the host's baseline unless an admin pinned more.
type HostCapacity struct {
	HostID string
	// Baseline is the capacity of the host's first report that carried
	// one, as the server's caps allowed then (zero: none yet), and
	// BaselineAt when it came.
	Baseline   Capacity
	BaselineAt time.Time
	// Pinned is the capacity an admin set (zero: none), believed whatever
	// the host reports; PinnedAt is when and PinnedBy the admin token's
	// name (empty for the bootstrap token).
	Pinned   Capacity
	PinnedAt time.Time
	PinnedBy string
}

// HostCapacities keeps the hosts' capacity baselines and pins.
type HostCapacities interface {
	// RecordCapacityBaseline records c as the host's baseline unless the
	// host has one: the first call wins, later ones change nothing (so
	// servers racing on a host's first reports agree). It reports whether
	// it recorded c.
	RecordCapacityBaseline(ctx context.Context, hostID string, c Capacity, at time.Time) (bool, error)
	// PinCapacity sets the host's pinned capacity (a non-zero c, both
	// parts positive), with a host.capacity_pinned event naming ctx's
	// actor (WithActor). The host's baseline is kept.
	PinCapacity(ctx context.Context, hostID string, c Capacity, at time.Time) error
	// AllHostCapacities returns the record of every host that has a
	// baseline or a pin, sorted by host ID, in one read.
	AllHostCapacities(ctx context.Context) ([]HostCapacity, error)
}
