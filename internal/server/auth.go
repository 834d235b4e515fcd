package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/hatchery/hatchery/internal/fsutil"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/store"
)

// Principal is who made a request, as its token says.
type Principal struct {
	// Admin may do everything.
	Admin bool
	// Name is a named token's name (admin or deploy): events, apply records
	// and session limits say who ran what by it.
	Name string
	// Project is a deploy token's project ("<namespace>/<name>"), the only
	// one it may act on (projectScoped); "" for every other kind.
	Project string
	// Exec says a deploy token may also exec into its project's eggs.
	Exec bool
	// HostID is set for a host's own token: it may read its desired state
	// and the blobs that state references, and report its status.
	HostID string
	// JoinToken is the ID of a usable join token: it may only join.
	JoinToken string
}

// Deploy reports whether the principal is a deploy token.
func (p Principal) Deploy() bool { return p.Project != "" }

// actor is who the principal's work is recorded as in events and apply
// records: an admin token's name, or a deploy token's name and kind; ""
// for a host or a join token, whose own records name them.
func (p Principal) actor() string {
	switch {
	case p.Admin:
		return p.Name
	case p.Deploy():
		return store.DeployActor(p.Name)
	}
	return ""
}

// ErrUnauthenticated is what an Authenticator returns for a token it does not accept.
var ErrUnauthenticated = errors.New("missing or invalid token")

// Authenticator resolves a bearer token to a principal. The API asks it for
// every request but /healthz; routes then check what the principal may do.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (Principal, error)
}

// AdminToken accepts the admin token: it holds only the hash of its secret
// and compares hashes in constant time.
type AdminToken struct{ hash string }

// NewAdminToken returns an Authenticator for the admin token whose secret has
// the given hash (pki.HashSecret).
func NewAdminToken(hash string) AdminToken { return AdminToken{hash: hash} }

// Authenticate accepts "hatch-admin.<secret>.<fingerprint>" with the right secret.
func (a AdminToken) Authenticate(_ context.Context, token string) (Principal, error) {
	tok, err := pki.ParseToken(token)
	if err != nil || tok.Kind != pki.KindAdmin || !pki.EqualHash(pki.HashSecret(tok.Secret), a.hash) {
		return Principal{}, ErrUnauthenticated
	}
	return Principal{Admin: true, Name: AdminTokenName}, nil
}

// AdminTokenName is the name the admin token's hash is stored under.
const AdminTokenName = store.FirstAdminToken

// EnsureAdminToken makes the admin token at the server's first start: the
// token is written once to path (mode 0600) and only the hash of its secret
// is stored. It returns the stored hash, and the token itself only when it
// was just made, for the caller to print once.
//
// The file is written before the hash is stored, so a crash in between leaves
// a file whose token the next start adopts, never a stored hash whose token
// nobody has.
func EnsureAdminToken(ctx context.Context, tokens store.AdminTokens, path, fingerprint string, now time.Time) (hash, fresh string, err error) {
	hash, err = tokens.TokenHash(ctx, AdminTokenName)
	if err == nil {
		return hash, "", nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return "", "", err
	}
	var tok pki.Token
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		if tok, err = pki.ParseToken(string(data)); err != nil {
			return "", "", fmt.Errorf("admin token file %s: %w", path, err)
		}
	case errors.Is(err, fs.ErrNotExist):
		tok = pki.NewToken(pki.KindAdmin, fingerprint)
		if err := fsutil.WriteFileAtomic(path, []byte(tok.String()+"\n"), 0o600); err != nil {
			return "", "", fmt.Errorf("write admin token: %w", err)
		}
		fresh = tok.String()
	default:
		return "", "", fmt.Errorf("read admin token: %w", err)
	}
	err = tokens.CreateTokenHash(ctx, AdminTokenName, tok.Hash(), now)
	if errors.Is(err, store.ErrExists) { // another server of a shared store was first
		hash, err = tokens.TokenHash(ctx, AdminTokenName)
		return hash, "", err
	}
	if err != nil {
		return "", "", err
	}
	return tok.Hash(), fresh, nil
}

// bearer returns the token of an "Authorization: Bearer <token>" header.
func bearer(header string) string {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}
