package sqlite

// WatchEvents returns a channel closed when the next event is recorded.
func (s *Store) WatchEvents() <-chan struct{} { return s.events.Wait(eventsKey) }
