// Package api declares the control plane's HTTP API as Go values: every
// request and answer body of docs/API.md, once. The server encodes them and
// the client decodes them from this one declaration, so the two cannot drift
// apart. It holds no behaviour but the error codes' meaning; the agent's own
// wire (desired state, status report) is package contract.
package api

import (
	"fmt"
	"net/url"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
)

// ProjectPath is the API path of a project, with more appended ("/plan").
func ProjectPath(namespace, project, more string) string {
	return "/api/v1/projects/" + url.PathEscape(namespace) + "/" + url.PathEscape(project) + more
}

// HeaderServers is the header of every desired-state answer that lists the
// control plane's live servers, comma-separated: the URLs a host may go to
// when the one it talks to stops answering.
const HeaderServers = "Hatch-Servers"

// HeaderError carries an error answer's body (its JSON, on one line) in a
// header too, for the answers that cannot have a body: a HEAD's. Without
// it a HEAD refused by a server whose database is down said only "503
// Service Unavailable".
const HeaderError = "Hatch-Error"

// Error is every error answer's body, {"error": CODE, "message": TEXT}, and
// the error a service returns for something its caller got wrong. Any other
// error a service returns is the server's own failure.
type Error struct {
	Code    Code   `json:"error"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Code says what went wrong, for a program to branch on.
type Code string

// The codes of docs/API.md.
const (
	CodeBadRequest       Code = "bad_request"
	CodeNotFound         Code = "not_found"
	CodeConflict         Code = "conflict"
	CodeLocked           Code = "locked"
	CodeStalePlan        Code = "stale_plan"
	CodeNameTaken        Code = "name_taken"
	CodeTooLarge         Code = "too_large"
	CodeDigestMismatch   Code = "digest_mismatch"
	CodeUnauthorized     Code = "unauthorized"
	CodeForbidden        Code = "forbidden"
	CodeRateLimited      Code = "rate_limited"
	CodeMethodNotAllowed Code = "method_not_allowed"
	CodeInternal         Code = "internal"
	CodeUnavailable      Code = "unavailable"
	// CodeTimeout: the server took longer than the request's deadline;
	// trying again may work, or the deadline is raised.
	CodeTimeout Code = "timeout"
	// CodeGone: what a rollback needs is no longer kept (the apply left the
	// history, its build context was collected, a secret it uses was
	// removed). Nothing was changed.
	CodeGone Code = "gone"
	// CodeImageUnresolved: the control plane could not resolve an egg's
	// image tag to a digest through its registry (unreachable, a login it
	// refused, no such tag). Nothing was planned; the message names the
	// egg, the image and the registry.
	CodeImageUnresolved Code = "image_unresolved"
)

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// BadRequest is Errorf(CodeBadRequest, ...): the message names the field.
func BadRequest(format string, args ...any) *Error { return Errorf(CodeBadRequest, format, args...) }

// NotFound is Errorf(CodeNotFound, ...).
func NotFound(format string, args ...any) *Error { return Errorf(CodeNotFound, format, args...) }

// --- Hosts and tokens ---

// Host is a host as GET /api/v1/hosts lists it.
type Host struct {
	ID string `json:"id"`
	// Name is the name the host joined with, and RemovedAt when `hatch
	// hosts remove` revoked its token.
	Name       string    `json:"name,omitempty"`
	RemovedAt  time.Time `json:"removed_at,omitzero"`
	State      string    `json:"state"`
	StateSince time.Time `json:"state_since"`
	LastSeen   time.Time `json:"last_seen,omitzero"`
	// DesiredVersion is the version of the host's desired state, and
	// ReportedVersion the one its agent last said it converged towards.
	DesiredVersion  string `json:"desired_version,omitempty"`
	ReportedVersion string `json:"reported_version,omitempty"`
	// Errors are the host's current problems as its agent last reported
	// them (a desired state it cannot cache, a failed pull, a full disk).
	Errors []string `json:"errors,omitempty"`
	// Capacity is what the host reported of its capacity and what
	// placement believes.
	Capacity *HostCapacity `json:"capacity,omitempty"`
	// Engine is set while the host's agent reports that its Docker Engine
	// does not answer.
	Engine *contract.EngineProblem `json:"engine,omitempty"`
}

// HostList is GET /api/v1/hosts.
type HostList struct {
	Hosts []Host `json:"hosts"`
}

// HostDetail is GET /api/v1/hosts/{id}: the host and its last report (nil
// before one).
type HostDetail struct {
	Host
	Status *contract.StatusReport `json:"status"`
}

// JoinRequest is the body of POST /api/v1/join: an agent trading a join
// token for a host identity.
type JoinRequest struct {
	// Name is the host name asked for (the server picks the ID when none).
	Name string `json:"name,omitempty"`
	// CSR is a PEM certificate request for the host's key, made on the
	// host (the key never leaves it). An agent older than host
	// certificates sends none, and gets its certificate later through
	// POST /api/v1/hosts/{id}/certificate.
	CSR string `json:"csr,omitempty"`
}

// JoinResponse is the answer of POST /api/v1/join.
type JoinResponse struct {
	HostID string `json:"host_id"`
	Name   string `json:"name"`
	// Token is the host token: shown this once, only its hash is kept.
	Token string `json:"token"`
	// Certificate is the host certificate for the CSR's key and HostCA the
	// host CA's certificate (PEM each), when a CSR was sent.
	Certificate string `json:"certificate,omitempty"`
	HostCA      string `json:"host_ca,omitempty"`
}

// CertificateRequest is the body of POST /api/v1/hosts/{id}/certificate:
// a host renewing its certificate, for a key it made anew.
type CertificateRequest struct {
	CSR string `json:"csr"`
}

// HostCertificate is the answer of POST /api/v1/hosts/{id}/certificate.
type HostCertificate struct {
	Certificate string `json:"certificate"`
	HostCA      string `json:"host_ca"`
}

// CreateJoinTokenRequest is POST /api/v1/join-tokens's body.
type CreateJoinTokenRequest struct {
	// TTL is a Go duration; default 1h.
	TTL string `json:"ttl,omitempty"`
	// Uses is how many hosts may join with it; default 1.
	Uses int `json:"uses,omitempty"`
}

// JoinToken is a join token as the API shows it. Token is set only in the
// answer that made it: the server keeps only its hash.
type JoinToken struct {
	ID        string    `json:"id"`
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	Uses      int       `json:"uses"`
	MaxUses   int       `json:"max_uses"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
	Token     string    `json:"token,omitempty"`
}

// CreateAdminTokenRequest is POST /api/v1/admin-tokens's body: a named
// admin token, or a deploy token of one project.
type CreateAdminTokenRequest struct {
	// Name is what events and apply records will say ran things with it:
	// letters, digits, '-', '_' and '.', unique forever among named tokens
	// of either kind.
	Name string `json:"name"`
	// Kind is TokenKindAdmin (the default, "") or TokenKindDeploy.
	Kind string `json:"kind,omitempty"`
	// Namespace and Project name a deploy token's project, the only one
	// it may plan, apply, roll back and read; an admin token has neither.
	Namespace string `json:"namespace,omitempty"`
	Project   string `json:"project,omitempty"`
	// Exec lets a deploy token also exec into its project's eggs.
	Exec bool `json:"exec,omitempty"`
}

// The kinds of named token.
const (
	// TokenKindAdmin may call every endpoint an admin may.
	TokenKindAdmin = "admin"
	// TokenKindDeploy may call the endpoints of its own project (and exec
	// into its eggs only when made with Exec), upload blobs and read its
	// project's events: docs/API.md, "Authentication".
	TokenKindDeploy = "deploy"
)

// AdminToken is a named token (admin or deploy: Kind) as the API shows it.
// Token is set only in the answer that made it: the server keeps only its
// hash. First marks the token the server made at its first start (in its
// data dir), which cannot be revoked through the API.
type AdminToken struct {
	Name      string    `json:"name"`
	Kind      string    `json:"kind"`
	Namespace string    `json:"namespace,omitempty"`
	Project   string    `json:"project,omitempty"`
	Exec      bool      `json:"exec,omitempty"`
	First     bool      `json:"first,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
	Token     string    `json:"token,omitempty"`
}

// AdminTokenList is GET /api/v1/admin-tokens.
type AdminTokenList struct {
	AdminTokens []AdminToken `json:"admin_tokens"`
}

// JoinTokenList is GET /api/v1/join-tokens.
type JoinTokenList struct {
	JoinTokens []JoinToken `json:"join_tokens"`
}

// RemovedHost is the answer of DELETE /api/v1/hosts/{id}.
type RemovedHost struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	JoinedAt  time.Time `json:"joined_at"`
	RemovedAt time.Time `json:"removed_at,omitzero"`
}

// --- Blobs and events ---

// StoredBlob is the answer of PUT /api/v1/blobs/{digest}.
type StoredBlob struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}

// Event is one entry of the event log.
type Event struct {
	Seq      int64     `json:"seq"`
	Time     time.Time `json:"time"`
	Type     string    `json:"type"`
	Project  string    `json:"project,omitempty"`
	Host     string    `json:"host,omitempty"`
	Resource string    `json:"resource,omitempty"`
	Message  string    `json:"message"`
	// Actor is the name of the admin token whose request caused the event.
	Actor string `json:"actor,omitempty"`
}

// EventList is GET /api/v1/events without follow.
type EventList struct {
	Events []Event `json:"events"`
}

// CertificateList is GET /api/v1/certificates: the certificate of every
// hostname served over HTTPS, never a key.
type CertificateList struct {
	Certificates []Certificate `json:"certificates"`
}

// Certificate is one hostname's TLS certificate as status shows it.
type Certificate struct {
	Host string `json:"host"`
	// Source is "acme" (the server's ACME CA) or "secret" (the user's).
	Source string `json:"source"`
	// Issuer and NotAfter describe the certificate served; empty before
	// the first one.
	Issuer   string    `json:"issuer,omitempty"`
	NotAfter time.Time `json:"not_after,omitzero"`
	// LastError is why the last ACME attempt failed, if it did: the
	// current certificate keeps serving meanwhile.
	LastError string `json:"last_error,omitempty"`
}
