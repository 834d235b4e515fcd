package client

import (
	"context"
	"net/url"

	"github.com/coder/websocket"

	"github.com/hatchery/hatchery/internal/api"
)

// Sessions opens an operator's WebSocket streams to a project's replicas
// (docs/API.md, "Sessions: logs and exec"). Get one with Client.Sessions.
type Sessions struct{ c *Client }

// Logs opens the project's logs stream (GET .../logs with query q: egg,
// slot, follow, since, tail, host): contract.LogRecord text messages until
// the server closes it (at once after the last line without follow).
func (s *Sessions) Logs(ctx context.Context, namespace, project string, q url.Values) (*websocket.Conn, error) {
	return s.c.Dial(ctx, api.ProjectPath(namespace, project, "/logs")+"?"+q.Encode())
}

// Attach opens the stream of a terminal's run (GET .../runs/{id}/attach
// with query q: width, height), as Exec's: the run's host starts its
// container once attached.
func (s *Sessions) Attach(ctx context.Context, namespace, project, runID string, q url.Values) (*websocket.Conn, error) {
	return s.c.Dial(ctx, api.ProjectPath(namespace, project, "/runs/"+url.PathEscape(runID)+"/attach")+"?"+q.Encode())
}

// Exec opens a stream to a command run in the egg's replica (GET
// .../eggs/{egg}/exec with query q: cmd repeated, slot, tty, stdin, width,
// height): binary messages carry the bytes, text messages
// contract.ExecControl.
func (s *Sessions) Exec(ctx context.Context, namespace, project, egg string, q url.Values) (*websocket.Conn, error) {
	return s.c.Dial(ctx, api.ProjectPath(namespace, project, "/eggs/"+url.PathEscape(egg)+"/exec")+"?"+q.Encode())
}
