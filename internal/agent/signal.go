package agent

// Signal coalesces "something changed" notifications: any number of Fire
// calls between two receives from C wake the receiver once. That is what
// keeps converges one at a time with at most one more queued behind the one
// running, however many Docker events or task completions arrive meanwhile.
// The zero value is not usable; use NewSignal. Safe for concurrent use.
type Signal struct {
	c chan struct{}
}

// NewSignal returns a signal with nothing pending.
func NewSignal() *Signal { return &Signal{c: make(chan struct{}, 1)} }

// Fire records that something changed. It never blocks, so it may be called
// from any goroutine, including the Docker adapter's callbacks.
func (s *Signal) Fire() {
	select {
	case s.c <- struct{}{}:
	default: // a wake-up is already pending: this one joins it
	}
}

// C is received from once per pending wake-up.
func (s *Signal) C() <-chan struct{} { return s.c }
