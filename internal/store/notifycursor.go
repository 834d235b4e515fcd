package store

import "context"

// NotifyCursor keeps where the delivery of notifications stands in the event
// log: the loops' holder hands each event after it to the webhooks, then
// moves it, fenced by the loops' lease, so that with several servers an
// event is notified by one of them, once.
type NotifyCursor interface {
	// NotifyCursor returns the seq of the last event handed to the
	// notifications; when none was ever recorded, the seq of the newest event
	// (0 for an empty log): a control plane that starts notifying does so from
	// now on, not for its whole past.
	NotifyCursor(ctx context.Context) (int64, error)
	// SetNotifyCursor records seq as the last event handed over; a write
	// fenced by ctx's fences (the loops' lease).
	SetNotifyCursor(ctx context.Context, seq int64) error
}
