package client

import (
	"bufio"
	"io"
	"strings"
)

// sseEvent is one server-sent event.
type sseEvent struct {
	ID   string
	Type string // "message" when the event names none
	Data string // data lines joined by "\n"
}

// readSSE reads a text/event-stream, calling fn for each event as its blank
// line arrives. Comment lines (": keep-alive") and unknown fields are
// skipped, as the format says. It returns fn's first error, the reader's, or
// nil at the end of the stream.
func readSSE(r io.Reader, fn func(sseEvent) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20) // an event is one JSON line: allow big ones
	var ev sseEvent
	var data []string
	has := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if has {
				ev.Data = strings.Join(data, "\n")
				if ev.Type == "" {
					ev.Type = "message"
				}
				if err := fn(ev); err != nil {
					return err
				}
			}
			ev, data, has = sseEvent{}, nil, false
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			ev.ID, has = value, true
		case "event":
			ev.Type, has = value, true
		case "data":
			data, has = append(data, value), true
		}
	}
	return sc.Err()
}
