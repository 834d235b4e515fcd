package store

import "sync"

// Notifier wakes every waiter of a key at once. A waiter asks for a channel
// with Wait; the next Notify of that key closes it. It costs one channel per
// key with waiters, whatever their number, and nothing per Notify of a key
// nobody waits for.
//
// Stores use it to tell this process about their own writes; a store shared
// by several servers (PostgreSQL) also calls Notify for the writes of the
// others as it learns of them.
type Notifier struct {
	mu      sync.Mutex               // guards waiting
	waiting map[string]chan struct{} // key -> channel closed at its next Notify
}

// Wait returns a channel closed at the next Notify(key) after the call.
func (n *Notifier) Wait(key string) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.waiting == nil {
		n.waiting = map[string]chan struct{}{}
	}
	ch, ok := n.waiting[key]
	if !ok {
		ch = make(chan struct{})
		n.waiting[key] = ch
	}
	return ch
}

// Notify wakes everyone waiting on key.
func (n *Notifier) Notify(key string) {
	n.mu.Lock()
	ch, ok := n.waiting[key]
	delete(n.waiting, key)
	n.mu.Unlock()
	if ok {
		close(ch)
	}
}

// NotifyAll wakes every waiter of every key: for a store that learns of other
// servers' writes and may have missed some (its listening connection was
// lost), a spurious wake-up is cheap and a missed one is a stuck long-poll.
func (n *Notifier) NotifyAll() {
	n.mu.Lock()
	waiting := n.waiting
	n.waiting = nil
	n.mu.Unlock()
	for _, ch := range waiting {
		close(ch)
	}
}
