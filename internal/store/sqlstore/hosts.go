package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// HostList lists the hosts (store.HostList): the one method Liveness and
// Statuses both need, held here once.
type HostList struct{ base }

var _ store.HostList = (*HostList)(nil)

// ListHosts returns every host, sorted by ID.
func (s *HostList) ListHosts(ctx context.Context) ([]store.Host, error) {
	rows, err := s.db.Query(ctx, `SELECT `+hostColumns+` FROM hosts ORDER BY id`+s.d.ByteOrder)
	if err != nil {
		return nil, fmt.Errorf("list hosts: %w", err)
	}
	out, err := collect(rows, scanHost)
	if err != nil {
		return nil, fmt.Errorf("list hosts: %w", err)
	}
	return out, nil
}

const hostColumns = `id, state, state_since, last_seen`

func scanHost(row Row) (store.Host, error) {
	var h store.Host
	var state string
	var since, seen int64
	if err := row.Scan(&h.ID, &state, &since, &seen); err != nil {
		return store.Host{}, err
	}
	h.State, h.StateSince, h.LastSeen = store.HostState(state), FromMillis(since), FromMillis(seen)
	return h, nil
}

func hostEvent(typ store.EventType, host string, at time.Time, msg string) store.Event {
	return store.Event{Time: at, Type: typ, Host: host, Message: msg}
}
