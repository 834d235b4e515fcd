package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/pki/authority"
	"github.com/hatchery/hatchery/internal/store"
)

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

// Join trades a usable join token for a new host: an ID, the name asked for
// (the ID when none is), a host token, shown this once, and, for the CSR
// sent, a host certificate with the host CA's. A bad CSR is refused before
// the token is spent. A join token spent by a join that raced this one gives
// api.CodeUnauthorized; a name taken gives api.CodeNameTaken.
func (s *Service) Join(ctx context.Context, joinToken string, req api.JoinRequest) (api.JoinResponse, error) {
	name := req.Name
	if name != "" && !hostNamePattern.MatchString(name) {
		return api.JoinResponse{}, api.BadRequest("name: %q is not a host name (letters, digits, '-' and '.', at most 63, "+
			"starting and ending with a letter or digit)", name)
	}
	if req.CSR != "" {
		if _, err := authority.ParseHostCSR([]byte(req.CSR)); err != nil {
			return api.JoinResponse{}, api.BadRequest("csr: %v", err)
		}
	}
	joinTok, err := pki.ParseToken(joinToken)
	if err != nil {
		return api.JoinResponse{}, fmt.Errorf("join token: %w", err)
	}
	id := newHostID()
	if name == "" {
		name = id
	}
	hostTok := pki.NewToken(pki.KindHost, s.deps.Fingerprint)
	now := s.now()
	err = s.deps.Members.JoinHost(ctx, joinTok.Hash(), store.HostIdentity{ID: id, Name: name, TokenHash: hostTok.Hash(), JoinedAt: now})
	switch {
	case errors.Is(err, store.ErrNotFound): // spent by a join that raced this one
		j, lookupErr := s.deps.JoinTokens.JoinTokenByHash(ctx, joinTok.Hash())
		if lookupErr != nil {
			return api.JoinResponse{}, lookupErr
		}
		return api.JoinResponse{}, api.Errorf(api.CodeUnauthorized, "%s", JoinRefusal(j.ID, j.State(now)))
	case errors.Is(err, store.ErrExists):
		holder, lookupErr := s.deps.Members.FindHost(ctx, name)
		if lookupErr != nil {
			return api.JoinResponse{}, api.Errorf(api.CodeNameTaken, "host name %q is taken: choose another --name", name)
		}
		return api.JoinResponse{}, api.Errorf(api.CodeNameTaken, "host name %q is taken by host %s (joined %s): choose another --name, "+
			"or remove that host first with `hatch hosts remove %s`", name, holder.ID, holder.JoinedAt.Format(time.RFC3339), name)
	case err != nil:
		return api.JoinResponse{}, err
	}
	answer := api.JoinResponse{HostID: id, Name: name, Token: hostTok.String()}
	if req.CSR != "" {
		// The host exists now: a failure here leaves it to get its
		// certificate through the renewal route, as an older agent does.
		cert, err := s.deps.HostCA.SignHost([]byte(req.CSR), id, now)
		if err != nil {
			return api.JoinResponse{}, fmt.Errorf("host %s joined, but its certificate was not signed: %w", id, err)
		}
		answer.Certificate, answer.HostCA = string(cert), string(s.deps.HostCA.CertPEM())
	}
	s.log.Info("host joined", zap.String("host", id), zap.String("name", name), zap.Bool("certificate", answer.Certificate != ""))
	s.syncPeers(ctx, "join")
	return answer, nil
}

// RenewCertificate signs a host's new CSR (for a key it made anew) with its
// own ID, whatever the CSR names: the caller authenticated the host.
func (s *Service) RenewCertificate(hostID string, req api.CertificateRequest) (api.HostCertificate, error) {
	cert, err := s.deps.HostCA.SignHost([]byte(req.CSR), hostID, s.now())
	if errors.Is(err, authority.ErrBadCSR) {
		return api.HostCertificate{}, api.BadRequest("csr: %v", err)
	}
	if err != nil {
		return api.HostCertificate{}, fmt.Errorf("sign host %s's certificate: %w", hostID, err)
	}
	s.log.Info("host certificate issued", zap.String("host", hostID))
	return api.HostCertificate{Certificate: string(cert), HostCA: string(s.deps.HostCA.CertPEM())}, nil
}

// JoinRefusal is why a join token no longer works, for its holder.
func JoinRefusal(id, state string) string {
	return fmt.Sprintf("join token %s is %s: make a new one with `hatch token create --join`", id, state)
}

// CheckFingerprint checks a CA fingerprint's form: 64 lowercase hex digits.
func CheckFingerprint(fp string) error {
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

func joinTokenView(t store.JoinToken, now time.Time) api.JoinToken {
	return api.JoinToken{ID: t.ID, State: t.State(now), CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt,
		Uses: t.Uses, MaxUses: t.MaxUses, RevokedAt: t.RevokedAt}
}

// CreateJoinToken makes a join token (default: for one host, for an hour);
// the answer is the only place its secret is ever shown.
func (s *Service) CreateJoinToken(ctx context.Context, req api.CreateJoinTokenRequest) (api.JoinToken, error) {
	ttl := defaultJoinTTL
	if req.TTL != "" {
		var err error
		if ttl, err = time.ParseDuration(req.TTL); err != nil || ttl <= 0 || ttl > maxJoinTTL {
			return api.JoinToken{}, api.BadRequest("ttl: %q is not a duration between 1s and %v (for example 1h)", req.TTL, maxJoinTTL)
		}
	}
	uses := req.Uses
	if uses == 0 {
		uses = 1
	}
	if uses < 1 || uses > maxJoinUses {
		return api.JoinToken{}, api.BadRequest("uses: %d is not between 1 and %d", req.Uses, maxJoinUses)
	}
	tok := pki.NewToken(pki.KindJoin, s.deps.Fingerprint)
	now := s.now()
	stored := store.JoinToken{ID: store.JoinTokenID(tok.Hash()), Hash: tok.Hash(), CreatedAt: now, ExpiresAt: now.Add(ttl), MaxUses: uses}
	if err := s.deps.JoinTokens.CreateJoinToken(ctx, stored); err != nil {
		return api.JoinToken{}, err
	}
	s.log.Info("join token created", zap.String("id", stored.ID), zap.Time("expires", stored.ExpiresAt), zap.Int("uses", uses))
	view := joinTokenView(stored, now)
	view.Token = tok.String()
	return view, nil
}

// JoinTokens lists every join token, oldest first, without their secrets.
func (s *Service) JoinTokens(ctx context.Context) ([]api.JoinToken, error) {
	all, err := s.deps.JoinTokens.ListJoinTokens(ctx)
	if err != nil {
		return nil, err
	}
	now := s.now()
	out := make([]api.JoinToken, 0, len(all))
	for _, t := range all {
		out = append(out, joinTokenView(t, now))
	}
	return out, nil
}

// RevokeJoinToken revokes a join token; an unknown ID gives api.CodeNotFound.
func (s *Service) RevokeJoinToken(ctx context.Context, id string) (api.JoinToken, error) {
	t, err := s.deps.JoinTokens.RevokeJoinToken(ctx, id, s.now())
	if errors.Is(err, store.ErrNotFound) {
		return api.JoinToken{}, api.NotFound("no join token %q: `hatch token list` shows them", id)
	}
	if err != nil {
		return api.JoinToken{}, err
	}
	s.log.Info("join token revoked", zap.String("id", id))
	return joinTokenView(t, s.now()), nil
}

// RemoveHost revokes a host's token at once (its agent is refused from its
// next request on) and marks it removed, so that placement moves its
// replicas. Its containers are left running: they are the operator's.
func (s *Service) RemoveHost(ctx context.Context, ref string) (api.RemovedHost, error) {
	h, err := s.deps.Members.FindHost(ctx, ref)
	if errors.Is(err, store.ErrNotFound) {
		return api.RemovedHost{}, api.NotFound("no host with ID or name %q: `hatch hosts` lists them", ref)
	}
	if err != nil {
		return api.RemovedHost{}, err
	}
	if h, err = s.deps.Members.RemoveHost(ctx, h.ID, s.now()); err != nil {
		return api.RemovedHost{}, err
	}
	s.log.Info("host removed", zap.String("host", h.ID), zap.String("name", h.Name))
	// Its peers close its mesh connections as soon as their states say so.
	s.syncPeers(ctx, "host removal")
	return api.RemovedHost{ID: h.ID, Name: h.Name, JoinedAt: h.JoinedAt, RemovedAt: h.RemovedAt}, nil
}
