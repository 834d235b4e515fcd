package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// HostCapacities keeps the hosts' capacity baselines and pins
// (store.HostCapacities).
type HostCapacities struct{ base }

var _ store.HostCapacities = (*HostCapacities)(nil)

// RecordCapacityBaseline records the host's baseline the first time only.
func (s *HostCapacities) RecordCapacityBaseline(ctx context.Context, hostID string, c store.Capacity, at time.Time) (bool, error) {
	if c.Memory <= 0 || c.MilliCPU <= 0 {
		return false, fmt.Errorf("capacity baseline of host %s: %+v is not positive", hostID, c)
	}
	recorded := false
	err := s.write(ctx, func(tx Tx) error {
		// A host pinned before its first report has a row without a
		// baseline: fill it in; otherwise add the row, unless another
		// server just did.
		n, err := tx.Exec(ctx, `UPDATE host_capacities SET baseline_memory = $2, baseline_milli_cpu = $3, baseline_at = $4
			WHERE host_id = $1 AND baseline_memory = 0`, hostID, c.Memory, c.MilliCPU, Millis(at))
		if err != nil || n > 0 {
			recorded = n > 0
			return err
		}
		n, err = tx.Exec(ctx, `INSERT INTO host_capacities (host_id, baseline_memory, baseline_milli_cpu, baseline_at,
			pinned_memory, pinned_milli_cpu, pinned_at, pinned_by) VALUES ($1, $2, $3, $4, 0, 0, 0, '')
			ON CONFLICT (host_id) DO NOTHING`, hostID, c.Memory, c.MilliCPU, Millis(at))
		recorded = n > 0
		return err
	})
	if err != nil {
		return false, fmt.Errorf("record capacity baseline of host %s: %w", hostID, err)
	}
	return recorded, nil
}

// PinCapacity sets the host's pinned capacity, with an event.
func (s *HostCapacities) PinCapacity(ctx context.Context, hostID string, c store.Capacity, at time.Time) error {
	if c.Memory <= 0 || c.MilliCPU <= 0 {
		return fmt.Errorf("pin capacity of host %s: %+v is not positive", hostID, c)
	}
	by := store.ActorOf(ctx)
	err := s.write(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, `UPDATE host_capacities SET pinned_memory = $2, pinned_milli_cpu = $3, pinned_at = $4, pinned_by = $5
			WHERE host_id = $1`, hostID, c.Memory, c.MilliCPU, Millis(at), by)
		if err != nil {
			return err
		}
		if n == 0 {
			if _, err := tx.Exec(ctx, `INSERT INTO host_capacities (host_id, baseline_memory, baseline_milli_cpu, baseline_at,
				pinned_memory, pinned_milli_cpu, pinned_at, pinned_by) VALUES ($1, 0, 0, 0, $2, $3, $4, $5)`,
				hostID, c.Memory, c.MilliCPU, Millis(at), by); err != nil {
				return err
			}
		}
		_, err = tx.AppendEvent(ctx, hostEvent(store.EventHostCapacityPinned, hostID, at,
			fmt.Sprintf("host %s's capacity was set to %d bytes of memory and %d milli-CPU: placement believes it whatever the host reports",
				hostID, c.Memory, c.MilliCPU)))
		return err
	})
	if err != nil {
		return fmt.Errorf("pin capacity of host %s: %w", hostID, err)
	}
	return nil
}

// AllHostCapacities returns every host's capacity record, sorted by host ID.
func (s *HostCapacities) AllHostCapacities(ctx context.Context) ([]store.HostCapacity, error) {
	rows, err := s.db.Query(ctx, `SELECT host_id, baseline_memory, baseline_milli_cpu, baseline_at,
		pinned_memory, pinned_milli_cpu, pinned_at, pinned_by FROM host_capacities ORDER BY host_id`+s.d.ByteOrder)
	if err != nil {
		return nil, fmt.Errorf("host capacities: %w", err)
	}
	out, err := collect(rows, func(row Row) (store.HostCapacity, error) {
		var h store.HostCapacity
		var baselineAt, pinnedAt int64
		err := row.Scan(&h.HostID, &h.Baseline.Memory, &h.Baseline.MilliCPU, &baselineAt,
			&h.Pinned.Memory, &h.Pinned.MilliCPU, &pinnedAt, &h.PinnedBy)
		h.BaselineAt, h.PinnedAt = FromMillis(baselineAt), FromMillis(pinnedAt)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("host capacities: %w", err)
	}
	return out, nil
}
