package api

import (
	"time"

	"github.com/hatchery/hatchery/internal/contract"
)

// HostCapacity is a host's capacity as `hatch hosts` shows it: what its
// agent last reported, and what placement believes, which is the report held
// to the host's first report (its baseline) and the server's caps, unless an
// admin pinned it (PUT /api/v1/hosts/{id}/capacity).
type HostCapacity struct {
	// Reported is the last report's (nil: the host said nothing).
	Reported *contract.HostCapacity `json:"reported,omitempty"`
	// Believed is what placement uses.
	Believed contract.HostCapacity `json:"believed"`
	// Baseline is the host's first report's, as capped (nil: none yet).
	Baseline *contract.HostCapacity `json:"baseline,omitempty"`
	// Source says where Believed comes from: reported, limited (the report
	// held to the baseline or the caps), baseline, pinned or assumed (as
	// small as the smallest known host).
	Source string `json:"source"`
	// PinnedBy and PinnedAt say who pinned it, and when.
	PinnedBy string    `json:"pinned_by,omitempty"`
	PinnedAt time.Time `json:"pinned_at,omitzero"`
	// Problem says why a report is not believed, and what confirms it.
	Problem string `json:"problem,omitempty"`
}

// SetHostCapacity is the body of PUT /api/v1/hosts/{id}/capacity: the
// capacity an admin pins. A part left out (zero) keeps what is believed now.
type SetHostCapacity struct {
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	MilliCPU    int64 `json:"milli_cpu,omitempty"`
}
