package sqlstore

import "github.com/hatchery/hatchery/internal/store"

// Changes is what a write transaction changed that others wait on: the
// backend's transaction collects it, and wakes them once it committed.
type Changes struct {
	// Hosts are the hosts whose desired state changed.
	Hosts []string
	// AllHosts: the peer list changed, which every host's state carries.
	AllHosts bool
	// Events: an event was recorded.
	Events bool
}

// Waiters are those waiting on a store's changes: the agents' long-polls on
// their desired states (store.DesiredStates.WatchDesiredState) and the event
// streams (store.Events.WatchEvents). A backend's Store embeds them, wakes
// them with its own commits, and, when other servers share its database,
// with theirs as it learns of them.
type Waiters struct {
	desired store.Notifier // keyed by host ID
	events  store.Notifier // one key
}

const eventsKey = "events"

// WatchDesiredState returns a channel closed at the next change of the
// host's desired state or of the peer list.
func (w *Waiters) WatchDesiredState(hostID string) <-chan struct{} { return w.desired.Wait(hostID) }

// WatchEvents returns a channel closed when the next event is recorded.
func (w *Waiters) WatchEvents() <-chan struct{} { return w.events.Wait(eventsKey) }

// Wake wakes the waiters of what c names.
func (w *Waiters) Wake(c Changes) {
	if c.AllHosts {
		w.desired.NotifyAll()
	}
	for _, h := range c.Hosts {
		w.desired.Notify(h)
	}
	if c.Events {
		w.events.Notify(eventsKey)
	}
}

// WakeAll wakes every waiter: for a store that may have missed other
// servers' changes (its listening connection was lost), a spurious wake-up
// is cheap and a missed one is a stuck long-poll.
func (w *Waiters) WakeAll() {
	w.desired.NotifyAll()
	w.events.NotifyAll()
}
