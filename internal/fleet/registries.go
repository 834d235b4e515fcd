package fleet

import (
	"context"
	"errors"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/store"
)

// RegistryLogins keeps the cluster-wide registry logins and delivers them
// to the desired states of the workloads that pull from their registries.
type RegistryLogins interface {
	LoginRegistry(ctx context.Context, host, username string, password []byte) (store.RegistryLogin, error)
	LogoutRegistry(ctx context.Context, host string) error
	RegistryLogins(ctx context.Context) ([]store.RegistryLogin, error)
}

// MaxRegistryPassword bounds a registry password (a token of a cloud
// registry is a few KiB at most).
const MaxRegistryPassword = 16 << 10

// LoginRegistry stores the cluster's login for a registry host: every egg
// pulling from it without a login of its project's gets it, at once.
func (s *Service) LoginRegistry(ctx context.Context, host string, req api.RegistryLoginRequest) (api.RegistryLogin, error) {
	switch {
	case !contract.ValidRegistryHost(host):
		return api.RegistryLogin{}, api.BadRequest("host: %q is not a registry host: give its hostname, with a port if it has one, as image references name it (ghcr.io, registry.example.com:5000; docker.io for Docker Hub)", host)
	case req.Username == "":
		return api.RegistryLogin{}, api.BadRequest("username: empty: give one with --username")
	case req.Password == "":
		return api.RegistryLogin{}, api.BadRequest("password: empty: give it on stdin or with --password-file")
	case len(req.Password) > MaxRegistryPassword:
		return api.RegistryLogin{}, api.BadRequest("password: longer than %d bytes", MaxRegistryPassword)
	}
	l, err := s.deps.Registries.LoginRegistry(ctx, host, req.Username, []byte(req.Password))
	if err != nil {
		return api.RegistryLogin{}, err
	}
	s.log.Info("registry login stored", zap.String("registry", host), zap.String("username", req.Username), zap.String("by", store.ActorOf(ctx)))
	return registryLoginView(l), nil
}

// LogoutRegistry deletes the cluster's login for a registry host.
func (s *Service) LogoutRegistry(ctx context.Context, host string) (api.RegistryLogin, error) {
	err := s.deps.Registries.LogoutRegistry(ctx, host)
	if errors.Is(err, store.ErrNotFound) {
		return api.RegistryLogin{}, api.NotFound("registry %q has no login: hatch registry list shows those that have", host)
	}
	if err != nil {
		return api.RegistryLogin{}, err
	}
	s.log.Info("registry login deleted", zap.String("registry", host), zap.String("by", store.ActorOf(ctx)))
	return api.RegistryLogin{Host: host, UpdatedAt: s.now()}, nil
}

// RegistryLogins lists the cluster's registry logins, without passwords.
func (s *Service) RegistryLogins(ctx context.Context) ([]api.RegistryLogin, error) {
	all, err := s.deps.Registries.RegistryLogins(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.RegistryLogin, 0, len(all))
	for _, l := range all {
		out = append(out, registryLoginView(l))
	}
	return out, nil
}

func registryLoginView(l store.RegistryLogin) api.RegistryLogin {
	return api.RegistryLogin{Host: l.Host, Username: l.Username, UpdatedAt: l.UpdatedAt}
}
