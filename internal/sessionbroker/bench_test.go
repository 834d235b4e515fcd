package sessionbroker

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// BenchmarkKeystrokeEcho measures an exec's keystroke echoed: a one-byte
// message from the operator to the agent, which sends it back, through the
// broker's Relay, beside the same round trip on one WebSocket without it
// (same run). Reported: p99 of each and relayed/direct.
func BenchmarkKeystrokeEcho(b *testing.B) {
	ctx := b.Context()
	br, err := New(DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	// Direct: the operator's end to an echoing server end.
	directServer, direct := pair(b)
	go echo(ctx, directServer)
	// Relayed: operator → relay → agent (echoing) → relay → operator.
	opServer, op := pair(b)
	agServer, ag := pair(b)
	go br.Pump(ctx, opServer, agServer)
	go echo(ctx, ag)

	const rounds = 2000
	measure := func(c *websocket.Conn) time.Duration {
		lat := make([]time.Duration, 0, rounds)
		for range rounds {
			start := time.Now()
			if err := c.Write(ctx, websocket.MessageBinary, []byte("k")); err != nil {
				b.Fatal(err)
			}
			if _, _, err := c.Read(ctx); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		slices.Sort(lat)
		return lat[len(lat)*99/100]
	}
	var d, r time.Duration
	for range b.N {
		d, r = measure(direct), measure(op)
	}
	b.ReportMetric(float64(d.Microseconds()), "direct-p99-µs")
	b.ReportMetric(float64(r.Microseconds()), "relayed-p99-µs")
	b.ReportMetric(float64(r)/float64(d), "relayed/direct")
}

func echo(ctx context.Context, c *websocket.Conn) {
	for {
		typ, data, err := c.Read(ctx)
		if err != nil {
			return
		}
		if c.Write(ctx, typ, data) != nil {
			return
		}
	}
}
