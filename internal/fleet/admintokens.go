package fleet

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/spec"
	"github.com/hatchery/hatchery/internal/store"
)

// adminTokenNamePattern is what a named token's name may be: a short word
// that reads well in an event ("apply 12 by alice").
var adminTokenNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// CreateAdminToken makes a named token, an admin token or a deploy token of
// one project (req.Kind), and returns it, shown this once. The name is
// checked, unique forever among the named tokens of both kinds (a revoked
// token's name stays taken, so that a name in the event log means one
// token), and recorded with a token.created event naming who made it.
func (s *Service) CreateAdminToken(ctx context.Context, req api.CreateAdminTokenRequest) (api.AdminToken, error) {
	stored, err := newNamedToken(req)
	if err != nil {
		return api.AdminToken{}, err
	}
	tok := pki.NewToken(stored.Kind, s.deps.Fingerprint)
	stored.Hash, stored.CreatedAt = tok.Hash(), s.now()
	err = s.deps.AdminTokens.CreateAdminToken(ctx, stored, store.ActorOf(ctx))
	if errors.Is(err, store.ErrExists) {
		return api.AdminToken{}, api.Errorf(api.CodeNameTaken,
			"a token named %q exists or existed (names are never reused, whatever the kind): choose another --name", req.Name)
	}
	if err != nil {
		return api.AdminToken{}, err
	}
	s.log.Info("token created", zap.String("kind", stored.Kind), zap.String("name", stored.Name),
		zap.String("project", stored.Project), zap.Bool("exec", stored.Exec), zap.String("by", store.ActorOf(ctx)))
	view := adminTokenView(stored)
	view.Token = tok.String()
	return view, nil
}

// newNamedToken checks a request for a named token and returns the token
// to store, without its secret. A deploy token's project need not exist
// yet: a pipeline's token is made before its first apply.
func newNamedToken(req api.CreateAdminTokenRequest) (store.AdminToken, error) {
	if !adminTokenNamePattern.MatchString(req.Name) {
		return store.AdminToken{}, api.BadRequest("name: %q is not a token name (letters, digits, '.', '_' and '-', at most 63, "+
			"starting with a letter or digit): give one with --name", req.Name)
	}
	switch req.Kind {
	case "", api.TokenKindAdmin:
		if req.Namespace != "" || req.Project != "" || req.Exec {
			return store.AdminToken{}, api.BadRequest("an admin token has no project and no exec right (it may do everything): " +
				"leave out namespace, project and exec, or ask for kind deploy")
		}
		return store.AdminToken{Name: req.Name, Kind: store.TokenAdmin}, nil
	case api.TokenKindDeploy:
		for _, f := range []struct{ field, value string }{{"namespace", req.Namespace}, {"project", req.Project}} {
			if !spec.ValidName(f.value) {
				return store.AdminToken{}, api.BadRequest("%s: %q is not a %s name (%s): a deploy token needs the project it may deploy",
					f.field, f.value, f.field, spec.NameRule)
			}
		}
		return store.AdminToken{Name: req.Name, Kind: store.TokenDeploy, Project: resource.Project(req.Namespace, req.Project),
			Exec: req.Exec}, nil
	}
	return store.AdminToken{}, api.BadRequest("kind: %q is not a kind of named token (want %s or %s)",
		req.Kind, api.TokenKindAdmin, api.TokenKindDeploy)
}

// AdminTokens lists every named token, admin and deploy, the first one
// included, oldest first, without their secrets.
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

// RevokeAdminToken revokes a named token, admin or deploy: it is refused
// from its next request on, and what it holds open ends (the server's rights
// check, EndedRights). The first admin token is refused here: it is the way
// back in, kept in the server's data dir.
func (s *Service) RevokeAdminToken(ctx context.Context, name string) (api.AdminToken, error) {
	if name == store.FirstAdminToken {
		return api.AdminToken{}, api.Errorf(api.CodeForbidden, "the first admin token %q cannot be revoked: it is the way back in "+
			"(the server's data dir keeps it); revoke the named tokens you gave out", name)
	}
	t, err := s.deps.AdminTokens.RevokeAdminToken(ctx, name, store.ActorOf(ctx), s.now())
	if errors.Is(err, store.ErrNotFound) {
		return api.AdminToken{}, api.NotFound("no token named %q: `hatch token list` shows them", name)
	}
	if err != nil {
		return api.AdminToken{}, err
	}
	s.log.Info("token revoked", zap.String("kind", t.Kind), zap.String("name", name), zap.String("by", store.ActorOf(ctx)))
	return adminTokenView(t), nil
}

func adminTokenView(t store.AdminToken) api.AdminToken {
	v := api.AdminToken{Name: t.Name, Kind: api.TokenKindAdmin, First: t.Name == store.FirstAdminToken,
		CreatedAt: t.CreatedAt, RevokedAt: t.RevokedAt}
	if t.IsDeploy() {
		v.Kind, v.Exec = api.TokenKindDeploy, t.Exec
		// A stored project was checked when the token was made.
		v.Namespace, v.Project, _ = resource.SplitProject(t.Project)
	}
	return v
}

// BlobUploaded records that a deploy token uploaded a blob new to the
// server, with a blob.uploaded event of its project (the actor, the token,
// comes with ctx): blob uploads are open to every deploy token, so the log
// says which project's token put each one there.
func (s *Service) BlobUploaded(ctx context.Context, project, digest string, size int64) error {
	_, err := s.deps.Events.AppendEvent(ctx, store.Event{Time: s.now(), Type: store.EventBlobUploaded, Project: project,
		Message: fmt.Sprintf("blob %s (%d bytes) uploaded", digest, size)})
	if err != nil {
		return fmt.Errorf("record the upload of blob %s: %w", digest, err)
	}
	return nil
}
