package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/store"
)

// authenticate resolves the request's bearer token under the limit on failed
// authentications. When the caller is refused it answers itself (429 while
// the address is over the limit, 401 for a token not accepted, 500 when the
// store failed) and returns false.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (Principal, bool) {
	key, now := clientKey(r.RemoteAddr), s.now()
	if wait := s.limiter.retryAfter(key, now); wait > 0 {
		s.metrics.authLimited.Inc()
		secs := int((wait + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		writeError(w, errorf(http.StatusTooManyRequests, "rate_limited",
			"too many failed authentications from this address: retry in %ds", secs))
		return Principal{}, false
	}
	p, err := s.deps.Auth.Authenticate(r.Context(), bearer(r.Header.Get("Authorization")))
	switch {
	case err == nil:
		return p, true
	case errors.Is(err, ErrUnauthenticated):
		s.metrics.authFailures.Inc()
		if s.limiter.fail(key, now) {
			// Once per emptied bucket: an attack does not flood the log.
			s.log.Warn("failed authentications over the limit: refusing the address for a while",
				zap.String("client", key), zap.Duration("retry_after", s.limiter.retryAfter(key, now)))
		}
		s.unauthorized(w, err)
	default:
		s.log.Error("authentication failed", zap.String("path", r.URL.Path), zap.Error(err))
		writeError(w, errorf(http.StatusInternalServerError, "internal", "the server failed; its log says why"))
	}
	return Principal{}, false
}

// joinTokenOnly lets a usable join token in, and nothing else: joining is
// all it may do, and nobody joins with another token.
func joinTokenOnly(p Principal, _ *http.Request) bool { return p.JoinToken != "" }

// hostBlobOrAdmin lets the admin read any blob, and a host only the blobs its
// own desired state references. A store failure refuses (and is logged): an
// agent retries, and a doubt never opens a blob.
func (s *Server) hostBlobOrAdmin(p Principal, r *http.Request) bool {
	if p.Admin {
		return true
	}
	if p.HostID == "" {
		return false
	}
	ok, err := s.referencesBlob(r.Context(), p.HostID, r.PathValue("digest"))
	if err != nil {
		s.log.Warn("blob access refused: the host's desired state could not be read",
			zap.String("host", p.HostID), zap.Error(err))
	}
	return ok
}

// referencesBlob reports whether the host's desired state builds from the blob.
func (s *Server) referencesBlob(ctx context.Context, hostID, digest string) (bool, error) {
	stored, err := s.deps.Desired.DesiredState(ctx, hostID)
	if err != nil || len(stored.Doc) == 0 {
		return false, err
	}
	// Blob IDs are not secret: the sealed form serves as it is.
	d, err := contract.DecodeDesiredState(bytes.NewReader(stored.Doc))
	if err != nil {
		return false, err
	}
	for _, w := range d.Workloads {
		if w.BlobID != "" && w.BlobID == digest {
			return true, nil
		}
	}
	return false, nil
}

// Limits of join tokens.
const (
	defaultJoinTTL  = time.Hour
	maxJoinTTL      = 30 * 24 * time.Hour
	maxJoinUses     = 1000
	hostIDRandBytes = 6
)

// hostNamePattern is what a host name may be: a DNS name's characters, so
// that the machine's host name (the agent's default) fits.
var hostNamePattern = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,61}[A-Za-z0-9])?$`)

// join trades a usable join token for a new host: an ID, the name asked for
// (the ID when none is), a host token, and, for the CSR sent, a host
// certificate with the host CA's. A bad CSR is refused before the token is
// spent.
func (s *Server) join(w http.ResponseWriter, r *http.Request) error {
	var req contract.JoinRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if req.Name != "" && !hostNamePattern.MatchString(req.Name) {
		return badRequest("name: %q is not a host name (letters, digits, '-' and '.', at most 63, "+
			"starting and ending with a letter or digit)", req.Name)
	}
	if req.CSR != "" {
		if _, err := pki.ParseHostCSR([]byte(req.CSR)); err != nil {
			return badRequest("csr: %v", err)
		}
	}
	joinTok, err := pki.ParseToken(bearer(r.Header.Get("Authorization")))
	if err != nil { // the route's access let a join token in: it parses
		return err
	}
	id := newHostID()
	name := req.Name
	if name == "" {
		name = id
	}
	hostTok := pki.NewToken(pki.KindHost, s.deps.Fingerprint)
	now := s.now()
	err = s.deps.Tokens.JoinHost(r.Context(), joinTok.Hash(), store.HostIdentity{
		ID: id, Name: name, TokenHash: hostTok.Hash(), JoinedAt: now,
	})
	switch {
	case errors.Is(err, store.ErrNotFound): // spent by a join that raced this one
		j, lookupErr := s.deps.Tokens.JoinTokenByHash(r.Context(), joinTok.Hash())
		if lookupErr != nil {
			return lookupErr
		}
		return errorf(http.StatusUnauthorized, "unauthorized", "%v", joinRefusal(j.ID, j.State(now)))
	case errors.Is(err, store.ErrExists):
		holder, lookupErr := s.deps.Tokens.FindHost(r.Context(), name)
		if lookupErr != nil {
			return errorf(http.StatusConflict, "name_taken", "host name %q is taken: choose another --name", name)
		}
		return errorf(http.StatusConflict, "name_taken", "host name %q is taken by host %s (joined %s): choose another --name, "+
			"or remove that host first with `hatch hosts remove %s`", name, holder.ID, holder.JoinedAt.Format(time.RFC3339), name)
	case err != nil:
		return err
	}
	answer := contract.JoinResponse{HostID: id, Name: name, Token: hostTok.String()}
	if req.CSR != "" {
		// The host exists now: a failure here leaves it to get its
		// certificate through the renewal route, as an older agent does.
		cert, err := s.deps.HostCA.SignHost([]byte(req.CSR), id, now)
		if err != nil {
			return fmt.Errorf("host %s joined, but its certificate was not signed: %w", id, err)
		}
		answer.Certificate, answer.HostCA = string(cert), string(s.deps.HostCA.CertPEM())
	}
	s.log.Info("host joined", zap.String("host", id), zap.String("name", name), zap.Bool("certificate", answer.Certificate != ""))
	writeJSON(w, http.StatusCreated, answer)
	return nil
}

// maxCSRBody limits a certificate request's body: a CSR is well under 1 KiB.
const maxCSRBody = 64 << 10

// renewHostCertificate signs a host's new CSR (a key it made anew) with
// its own ID, whatever the CSR names: the host token authenticated it.
// Removed hosts never get here, their token being refused.
func (s *Server) renewHostCertificate(w http.ResponseWriter, r *http.Request) error {
	host := r.PathValue("id")
	var req contract.CertificateRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	cert, err := s.deps.HostCA.SignHost([]byte(req.CSR), host, s.now())
	if errors.Is(err, pki.ErrBadCSR) {
		return badRequest("csr: %v", err)
	}
	if err != nil {
		return err
	}
	s.log.Info("host certificate issued", zap.String("host", host))
	writeJSON(w, http.StatusOK, contract.HostCertificate{Certificate: string(cert), HostCA: string(s.deps.HostCA.CertPEM())})
	return nil
}

// ownHostOnly lets a host act on its own {id}, and nobody else: not even the
// admin gets a host's certificate, whose key only the host makes.
func ownHostOnly(p Principal, r *http.Request) bool {
	return p.HostID != "" && p.HostID == r.PathValue("id")
}

// checkFingerprint checks a CA fingerprint's form: 64 lowercase hex digits.
func checkFingerprint(fp string) error {
	if b, err := hex.DecodeString(fp); err != nil || len(b) != 32 || fp != strings.ToLower(fp) {
		return fmt.Errorf("fingerprint %q: want 64 lowercase hex digits (the hex SHA-256 of the CA's DER)", fp)
	}
	return nil
}

// newHostID returns "h-" and 12 random hex digits.
func newHostID() string {
	b := make([]byte, hostIDRandBytes)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return "h-" + hex.EncodeToString(b)
}

type createJoinTokenRequest struct {
	// TTL is a Go duration; default 1h.
	TTL string `json:"ttl,omitempty"`
	// Uses is how many hosts may join with it; default 1.
	Uses int `json:"uses,omitempty"`
}

// joinTokenJSON is a join token as the API shows it; the token itself is
// shown only in the answer that made it.
type joinTokenJSON struct {
	ID        string    `json:"id"`
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	Uses      int       `json:"uses"`
	MaxUses   int       `json:"max_uses"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
	Token     string    `json:"token,omitempty"`
}

func joinTokenView(t store.JoinToken, now time.Time) joinTokenJSON {
	return joinTokenJSON{ID: t.ID, State: t.State(now), CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt,
		Uses: t.Uses, MaxUses: t.MaxUses, RevokedAt: t.RevokedAt}
}

func (s *Server) createJoinToken(w http.ResponseWriter, r *http.Request) error {
	var req createJoinTokenRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	ttl := defaultJoinTTL
	if req.TTL != "" {
		var err error
		if ttl, err = time.ParseDuration(req.TTL); err != nil || ttl <= 0 || ttl > maxJoinTTL {
			return badRequest("ttl: %q is not a duration between 1s and %v (for example 1h)", req.TTL, maxJoinTTL)
		}
	}
	uses := req.Uses
	if uses == 0 {
		uses = 1
	}
	if uses < 1 || uses > maxJoinUses {
		return badRequest("uses: %d is not between 1 and %d", req.Uses, maxJoinUses)
	}
	tok := pki.NewToken(pki.KindJoin, s.deps.Fingerprint)
	now := s.now()
	stored := store.JoinToken{ID: store.JoinTokenID(tok.Hash()), Hash: tok.Hash(), CreatedAt: now, ExpiresAt: now.Add(ttl), MaxUses: uses}
	if err := s.deps.Tokens.CreateJoinToken(r.Context(), stored); err != nil {
		return err
	}
	s.log.Info("join token created", zap.String("id", stored.ID), zap.Time("expires", stored.ExpiresAt), zap.Int("uses", uses))
	view := joinTokenView(stored, now)
	view.Token = tok.String()
	writeJSON(w, http.StatusCreated, view)
	return nil
}

func (s *Server) listJoinTokens(w http.ResponseWriter, r *http.Request) error {
	all, err := s.deps.Tokens.ListJoinTokens(r.Context())
	if err != nil {
		return err
	}
	now := s.now()
	out := make([]joinTokenJSON, 0, len(all))
	for _, t := range all {
		out = append(out, joinTokenView(t, now))
	}
	writeJSON(w, http.StatusOK, map[string]any{"join_tokens": out})
	return nil
}

func (s *Server) revokeJoinToken(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	t, err := s.deps.Tokens.RevokeJoinToken(r.Context(), id, s.now())
	if errors.Is(err, store.ErrNotFound) {
		return notFoundf("no join token %q: `hatch token list` shows them", id)
	}
	if err != nil {
		return err
	}
	s.log.Info("join token revoked", zap.String("id", id))
	writeJSON(w, http.StatusOK, joinTokenView(t, s.now()))
	return nil
}

// hostIdentityJSON is a joined host as the removal answers it.
type hostIdentityJSON struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	JoinedAt  time.Time `json:"joined_at"`
	RemovedAt time.Time `json:"removed_at,omitzero"`
}

// removeHost revokes a host's token at once (its agent is refused from its
// next request on) and marks it removed, so that placement moves its
// replicas. Its containers are left running: they are the operator's.
func (s *Server) removeHost(w http.ResponseWriter, r *http.Request) error {
	ref := r.PathValue("id")
	h, err := s.deps.Tokens.FindHost(r.Context(), ref)
	if errors.Is(err, store.ErrNotFound) {
		return notFoundf("no host with ID or name %q: `hatch hosts` lists them", ref)
	}
	if err != nil {
		return err
	}
	if h, err = s.deps.Tokens.RemoveHost(r.Context(), h.ID, s.now()); err != nil {
		return err
	}
	s.log.Info("host removed", zap.String("host", h.ID), zap.String("name", h.Name))
	writeJSON(w, http.StatusOK, hostIdentityJSON{ID: h.ID, Name: h.Name, JoinedAt: h.JoinedAt, RemovedAt: h.RemovedAt})
	return nil
}

// hostIdentities returns the joined hosts by ID, for the host views; none
// when the server keeps no tokens.
func (s *Server) hostIdentities(ctx context.Context) (map[string]store.HostIdentity, error) {
	if s.deps.Tokens == nil {
		return nil, nil
	}
	all, err := s.deps.Tokens.ListHostIdentities(ctx)
	if err != nil {
		return nil, err
	}
	byID := make(map[string]store.HostIdentity, len(all))
	for _, h := range all {
		byID[h.ID] = h
	}
	return byID, nil
}
