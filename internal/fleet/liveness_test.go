package fleet

import (
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

func TestDueDown(t *testing.T) {
	start := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	const timeout = 6 * time.Second
	tests := []struct {
		name string
		host store.Host
		now  time.Time
		want bool
	}{
		{"seen within the timeout", store.Host{State: store.HostUp, LastSeen: start.Add(10 * time.Second)}, start.Add(15 * time.Second), false},
		{"silent past the timeout", store.Host{State: store.HostUp, LastSeen: start.Add(10 * time.Second)}, start.Add(16*time.Second + 1), true},
		{"seen before the start, within a period of it", store.Host{State: store.HostUnknown, LastSeen: start.Add(-time.Hour)}, start.Add(6 * time.Second), false},
		{"seen before the start, a period after it", store.Host{State: store.HostUnknown, LastSeen: start.Add(-time.Hour)}, start.Add(6*time.Second + 1), true},
		{"never seen, a period after the start", store.Host{State: store.HostUnknown}, start.Add(7 * time.Second), true},
		{"already down", store.Host{State: store.HostDown}, start.Add(time.Hour), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := dueDown(tt.host, start, tt.now, timeout); got != tt.want {
				t.Fatalf("dueDown = %v, want %v", got, tt.want)
			}
		})
	}
}
