package sessionbroker

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/time/rate"
)

// MaxMessage bounds one message of a session's stream, either way.
const MaxMessage = 64 << 10

// closeReason is how the pump says why it closed one side: the close status
// and reason the other side gave, or the pump's own.
type closeReason struct {
	code   websocket.StatusCode
	reason string
}

// reasonOf turns a read's error into what to tell the other side: a close
// frame's code and reason pass on as they are (an agent's "exec is turned
// off here" reaches the operator), anything else is the peer going away.
func reasonOf(err error, who string) closeReason {
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		return closeReason{ce.Code, ce.Reason}
	}
	return closeReason{websocket.StatusGoingAway, who + " went away"}
}

// Pump passes messages both ways between the operator's and the agent's
// streams until one ends, then closes the other with the same close status
// and reason. Each direction is held to BytesPerSecond; a session no byte
// crossed for IdleTimeout is closed with StatusPolicyViolation.
func (b *Broker) Pump(ctx context.Context, operator, agent *websocket.Conn) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	operator.SetReadLimit(MaxMessage)
	agent.SetReadLimit(MaxMessage)
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	ends := make(chan func(), 2) // what to do with the other side, from the first direction to end
	pump := func(src, dst *websocket.Conn, who string) {
		lim := rate.NewLimiter(rate.Limit(b.cfg.BytesPerSecond), max(b.cfg.BytesPerSecond, MaxMessage))
		for {
			typ, data, err := src.Read(ctx)
			if err != nil {
				r := reasonOf(err, who)
				ends <- func() { _ = dst.Close(r.code, r.reason); src.CloseNow() }
				return
			}
			last.Store(time.Now().UnixNano())
			if err := lim.WaitN(ctx, len(data)); err != nil {
				ends <- func() {}
				return
			}
			if err := dst.Write(ctx, typ, data); err != nil {
				ends <- func() { src.CloseNow() }
				return
			}
		}
	}
	go pump(operator, agent, "the operator")
	go pump(agent, operator, "the host")
	idle := time.NewTicker(min(b.cfg.IdleTimeout/4, time.Second))
	defer idle.Stop()
	for {
		select {
		case end := <-ends:
			end()
			cancel()
			<-ends // the other direction sees the cancel
			operator.CloseNow()
			agent.CloseNow()
			return
		case <-idle.C:
			if time.Since(time.Unix(0, last.Load())) < b.cfg.IdleTimeout {
				continue
			}
			const why = "idle for too long: the session is closed"
			_ = operator.Close(websocket.StatusPolicyViolation, why)
			_ = agent.Close(websocket.StatusPolicyViolation, why)
		case <-ctx.Done():
			// The server is closing: both sides hear it.
			operator.CloseNow()
			agent.CloseNow()
			<-ends
			<-ends
			return
		}
	}
}
