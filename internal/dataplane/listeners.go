package dataplane

import (
	"fmt"
	"net"
	"os"
	"sync"
)

// listenerSet opens the data plane's listeners, taking first those its
// predecessor handed on, and keeps every one it opened so that it can hand
// them on in turn. A listener is known by its network and the address it
// was asked for ("tcp 127.0.0.1:0" may be several: they are handed on and
// taken in the order they were opened, which is the same in every data
// plane, since the same code opens them). It is the ingress's Listeners.
type listenerSet struct {
	mu        sync.Mutex // guards inherited and open
	inherited map[string][]net.Listener
	open      []keptListener
}

// keptListener is a listener and what it was asked for.
type keptListener struct {
	key string
	ln  net.Listener
}

func listenerKey(network, address string) string { return network + " " + address }

// Listen returns the listener handed on for network and address, if one is
// left, else the one open makes; either way it is kept.
func (s *listenerSet) Listen(network, address string, open func() (net.Listener, error)) (net.Listener, error) {
	key := listenerKey(network, address)
	s.mu.Lock()
	defer s.mu.Unlock()
	var ln net.Listener
	if q := s.inherited[key]; len(q) > 0 {
		ln, s.inherited[key] = q[0], q[1:]
	} else {
		var err error
		if ln, err = open(); err != nil {
			return nil, err
		}
	}
	s.open = append(s.open, keptListener{key: key, ln: ln})
	return ln, nil
}

// inherit takes the listeners handed on: files[i] is keys[i]'s socket. The
// files are closed (the listeners hold their own descriptors).
func (s *listenerSet) inherit(keys []string, files []*os.File) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(keys) != len(files) {
		return fmt.Errorf("handover: %d listeners named, %d sockets passed", len(keys), len(files))
	}
	s.inherited = make(map[string][]net.Listener)
	for i, f := range files {
		ln, err := net.FileListener(f)
		_ = f.Close() // FileListener made its own descriptor
		if err != nil {
			return fmt.Errorf("handover: listener %s: %w", keys[i], err)
		}
		s.inherited[keys[i]] = append(s.inherited[keys[i]], ln)
	}
	return nil
}

// closeUnused closes what was handed on and not asked for again (a port
// the table no longer publishes).
func (s *listenerSet) closeUnused() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range s.inherited {
		for _, ln := range q {
			_ = ln.Close() // serves nothing here
		}
	}
	s.inherited = nil
}

// filer is a listener whose socket can be handed on.
type filer interface {
	File() (*os.File, error)
}

// files returns a copy of the descriptor of every listener still open, in
// the order they were opened, with their keys. Unix listeners stop removing
// their socket file as they close: the successor serves it now. The caller
// closes the files.
func (s *listenerSet) files() ([]string, []*os.File) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	var files []*os.File
	for _, k := range s.open {
		fl, ok := k.ln.(filer)
		if !ok {
			continue
		}
		f, err := fl.File()
		if err != nil {
			continue // closed: a port no longer published
		}
		if u, ok := k.ln.(interface{ SetUnlinkOnClose(bool) }); ok {
			u.SetUnlinkOnClose(false)
		}
		keys, files = append(keys, k.key), append(files, f)
	}
	return keys, files
}
