package contract

import "time"

// A session is an operator's request that one host serves with a stream of
// its own: the logs of a project's containers, or a command run in one. The
// control plane never connects to a host: it offers sessions on a long-poll
// of their own (GET /api/v1/hosts/{id}/sessions, apart from the versioned
// desired state, so an agent restart never replays one and a session never
// wakes a converge), and the agent opens a WebSocket to the server for each,
// which the server pairs with the operator's.

// SessionKind says what a session does.
type SessionKind string

const (
	// SessionLogs streams the output of a project's containers.
	SessionLogs SessionKind = "logs"
	// SessionExec runs a command in one container.
	SessionExec SessionKind = "exec"
	// SessionAttach gives a terminal's run (Run.TTY) its operator's
	// terminal: it attaches to the run's container, then starts it.
	SessionAttach SessionKind = "attach"
)

// SessionOffer is one session the control plane asks a host to serve.
type SessionOffer struct {
	// ID is unguessable (32 random bytes): the stream that serves it must
	// name it, and come from the host it was offered to.
	ID   string      `json:"id"`
	Kind SessionKind `json:"kind"`
	// Actor is the admin token's name that asked, for the agent's log.
	Actor string       `json:"actor"`
	Logs  *LogsRequest `json:"logs,omitempty"`
	Exec  *ExecRequest `json:"exec,omitempty"`
	// Attach is a SessionAttach's.
	Attach *AttachRequest `json:"attach,omitempty"`
}

// SessionOffers is the answer of the sessions long-poll.
type SessionOffers struct {
	Sessions []SessionOffer `json:"sessions"`
}

// LogsRequest selects containers of one project on a host, and which lines.
type LogsRequest struct {
	// Project is "<namespace>/<project>".
	Project string `json:"project"`
	// Egg and Slot narrow it; "" and -1 for all.
	Egg  string `json:"egg,omitempty"`
	Slot int    `json:"slot"`
	// Follow keeps the stream open: new replicas are followed as they
	// start, and one that stops is said to have stopped.
	Follow bool `json:"follow,omitempty"`
	// Since shows only lines written at or after it (zero: all).
	Since time.Time `json:"since,omitzero"`
	// Tail is how many of each container's last lines to show first (-1: all).
	Tail int `json:"tail"`
	// Run, if set, reads one run's container (the one labelled with this
	// run ID, of Egg) instead of the egg's replicas; following, it waits
	// for the container to start and the session ends with its output.
	// Without it, runs' containers are left out.
	Run string `json:"run,omitempty"`
}

// LogRecord is one message of a logs stream (a WebSocket text message, JSON).
type LogRecord struct {
	// Time is when the container wrote the line (Docker's timestamp), or
	// when the replica started or stopped.
	Time time.Time `json:"time"`
	Host string    `json:"host"`
	Egg  string    `json:"egg"`
	Slot int       `json:"slot"`
	// Container is the container's ID (a roll has two in one slot).
	Container string `json:"container"`
	// Stream is "stdout" or "stderr" for a line; Event is "started" or
	// "stopped" for a replica that appeared or ended while following.
	Stream string `json:"stream,omitempty"`
	Line   string `json:"line,omitempty"`
	Event  string `json:"event,omitempty"`
}

// ExecRequest says what to run, where, and how.
type ExecRequest struct {
	Project string   `json:"project"`
	Egg     string   `json:"egg"`
	Slot    int      `json:"slot"`
	Cmd     []string `json:"cmd"`
	// TTY gives the command a terminal (raw input, window size, one
	// output stream); Stdin attaches the caller's input.
	TTY   bool `json:"tty,omitempty"`
	Stdin bool `json:"stdin,omitempty"`
	// Width and Height are the terminal's size at the start.
	Width  uint `json:"width,omitempty"`
	Height uint `json:"height,omitempty"`
}

// AttachRequest names a terminal's run (Run.TTY) on the host it was
// delivered to. Its stream is an exec's (ExecControl and binary messages):
// the agent attaches to the run's container, made and not started, starts
// it, passes bytes both ways and sends its exit code. A container already
// started is refused: a run's terminal is given once.
type AttachRequest struct {
	Project string `json:"project"`
	Egg     string `json:"egg"`
	Run     string `json:"run"`
	// Width and Height are the terminal's size at the start.
	Width  uint `json:"width,omitempty"`
	Height uint `json:"height,omitempty"`
}

// ExecControl is a text message of an exec stream (JSON); binary messages
// carry the bytes: stdin from the operator, stdout (the terminal's output
// with a TTY) to the operator.
type ExecControl struct {
	// Resize: the operator's terminal changed size (operator → agent).
	Width  uint `json:"width,omitempty"`
	Height uint `json:"height,omitempty"`
	// CloseStdin: the operator's input ended (operator → agent).
	CloseStdin bool `json:"close_stdin,omitempty"`
	// Stderr: bytes the command wrote on stderr, without a TTY (agent →
	// operator).
	Stderr []byte `json:"stderr,omitempty"`
	// Started: the command runs, in this container on this host (agent →
	// operator).
	Started   bool   `json:"started,omitempty"`
	Container string `json:"container,omitempty"`
	// Exit: the command ended with this code (agent → operator); the
	// stream closes after it.
	Exit *int `json:"exit,omitempty"`
}
