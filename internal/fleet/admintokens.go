package fleet

import (
	"context"
	"errors"
	"regexp"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/store"
)

// adminTokenNamePattern is what an admin token's name may be: a short word
// that reads well in an event ("apply 12 by alice").
var adminTokenNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// CreateAdminToken makes a named admin token and returns it, shown this once.
// The name is checked, unique forever (a revoked token's name stays taken,
// so that a name in the event log means one token), and recorded with a
// token.created event naming who made it.
func (s *Service) CreateAdminToken(ctx context.Context, req api.CreateAdminTokenRequest) (api.AdminToken, error) {
	if !adminTokenNamePattern.MatchString(req.Name) {
		return api.AdminToken{}, api.BadRequest("name: %q is not a token name (letters, digits, '.', '_' and '-', at most 63, "+
			"starting with a letter or digit): give one with --name", req.Name)
	}
	tok := pki.NewToken(pki.KindAdmin, s.deps.Fingerprint)
	stored := store.AdminToken{Name: req.Name, Hash: tok.Hash(), CreatedAt: s.now()}
	err := s.deps.AdminTokens.CreateAdminToken(ctx, stored, store.ActorOf(ctx))
	if errors.Is(err, store.ErrExists) {
		return api.AdminToken{}, api.Errorf(api.CodeNameTaken,
			"an admin token named %q exists or existed (names are never reused): choose another --name", req.Name)
	}
	if err != nil {
		return api.AdminToken{}, err
	}
	s.log.Info("admin token created", zap.String("name", stored.Name), zap.String("by", store.ActorOf(ctx)))
	view := adminTokenView(stored)
	view.Token = tok.String()
	return view, nil
}

// AdminTokens lists every admin token, the first one included, oldest first,
// without their secrets.
func (s *Service) AdminTokens(ctx context.Context) ([]api.AdminToken, error) {
	all, err := s.deps.AdminTokens.ListAdminTokens(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.AdminToken, 0, len(all))
	for _, t := range all {
		out = append(out, adminTokenView(t))
	}
	return out, nil
}

// RevokeAdminToken revokes a named admin token: it is refused from its next
// request on. The first admin token is refused here: it is the way back in,
// kept in the server's data dir.
func (s *Service) RevokeAdminToken(ctx context.Context, name string) (api.AdminToken, error) {
	if name == store.FirstAdminToken {
		return api.AdminToken{}, api.Errorf(api.CodeForbidden, "the first admin token %q cannot be revoked: it is the way back in "+
			"(the server's data dir keeps it); revoke the named tokens you gave out", name)
	}
	t, err := s.deps.AdminTokens.RevokeAdminToken(ctx, name, store.ActorOf(ctx), s.now())
	if errors.Is(err, store.ErrNotFound) {
		return api.AdminToken{}, api.NotFound("no admin token named %q: `hatch token list` shows them", name)
	}
	if err != nil {
		return api.AdminToken{}, err
	}
	s.log.Info("admin token revoked", zap.String("name", name), zap.String("by", store.ActorOf(ctx)))
	return adminTokenView(t), nil
}

func adminTokenView(t store.AdminToken) api.AdminToken {
	return api.AdminToken{Name: t.Name, First: t.Name == store.FirstAdminToken, CreatedAt: t.CreatedAt, RevokedAt: t.RevokedAt}
}
