package desired

import (
	"context"
	"fmt"
	"strings"

	"github.com/cenkalti/backoff/v4"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/store"
)

// clusterLoginPrefix starts the handle of a cluster-wide registry login's
// password (see clusterLoginHandle), which no secret handle does.
const clusterLoginPrefix = "hatch-registry:"

// clusterLoginHandle is the handle of a cluster login's password: its host
// and the fingerprint of the password, so that a new password changes the
// desired states carrying it (and rolls nothing: PullAuth is out of the spec
// hash).
func clusterLoginHandle(l store.RegistryLogin) string {
	return clusterLoginPrefix + l.Host + ":" + l.Fingerprint
}

// eggValues returns e with the cluster's login for its image's registry
// when its project has none (see withClusterLogin), and the values of the
// handles its workloads carry: its secrets' and its login's password.
func (s *States) eggValues(ctx context.Context, project string, e Egg) (Egg, map[string]contract.SecretValue, error) {
	values, err := s.secretValues(ctx, project, e.handles())
	if err != nil {
		return e, nil, err
	}
	if e.in.Image == "" || e.in.PullAuth != nil {
		return e, values, nil
	}
	auth, err := s.ClusterLogin(ctx, contract.ImageRegistry(e.in.Image))
	if err != nil || auth == nil {
		return e, values, err
	}
	e.in.PullAuth = &inputs.PullAuth{Registry: auth.Registry, Username: auth.Username, Password: auth.Handle}
	values[auth.Handle] = auth.Password
	return e, values, nil
}

// openLogin is a cluster login as workloads carry it, its password opened.
func (s *States) openLogin(l store.RegistryLogin) (*contract.RegistryAuth, error) {
	plain, err := s.box.Open(l.Sealed)
	if err != nil {
		return nil, backoff.Permanent(fmt.Errorf("the login of registry %s: %w", l.Host, err))
	}
	return &contract.RegistryAuth{Registry: l.Host, Username: l.Username, Handle: clusterLoginHandle(l), Password: contract.SecretValue(plain)}, nil
}

// SetClusterLogin delivers the cluster's login for a registry host, as it
// is stored now (none after a logout), to every workload and run pulling
// from that host that has no login of its project's: at once, without
// waiting for their eggs' next apply. Nothing rolls (PullAuth is out of the
// spec hash); an agent uses the new login at its next pull.
func (s *States) SetClusterLogin(ctx context.Context, host string) error {
	auth, err := s.ClusterLogin(ctx, host)
	if err != nil {
		return err
	}
	set := func(w *contract.WorkloadSpec) {
		if w.Image == "" || contract.ImageRegistry(w.Image) != host {
			return
		}
		if w.PullAuth == nil || strings.HasPrefix(w.PullAuth.Handle, clusterLoginPrefix) {
			w.PullAuth = auth
		}
	}
	return s.update(ctx, func(v *view) error {
		for _, d := range v.states {
			for i := range d.Workloads {
				set(&d.Workloads[i])
			}
			for i := range d.Runs {
				set(&d.Runs[i].Workload)
			}
		}
		return nil
	})
}

// LoginRegistry stores the cluster's login for a registry host (replacing
// its previous one), the password sealed, and delivers it at once (see
// SetClusterLogin).
func (s *States) LoginRegistry(ctx context.Context, host, username string, password []byte) (store.RegistryLogin, error) {
	l := store.RegistryLogin{Host: host, Username: username, Sealed: s.box.Seal(password),
		Fingerprint: strings.TrimPrefix(s.box.Fingerprint(password), "hmac-sha256:")[:32], UpdatedAt: s.now()}
	if err := s.secrets.PutRegistryLogin(ctx, l); err != nil {
		return store.RegistryLogin{}, err
	}
	return l, s.SetClusterLogin(ctx, host)
}

// LogoutRegistry deletes the cluster's login for a registry host
// (store.ErrNotFound if none) and takes it from every workload at once.
func (s *States) LogoutRegistry(ctx context.Context, host string) error {
	if err := s.secrets.DeleteRegistryLogin(ctx, host); err != nil {
		return err
	}
	return s.SetClusterLogin(ctx, host)
}

// RegistryLogins lists the cluster's registry logins, by host.
func (s *States) RegistryLogins(ctx context.Context) ([]store.RegistryLogin, error) {
	return s.secrets.ListRegistryLogins(ctx)
}

// ClusterLogin returns the cluster's login for a registry host, its
// password opened, or nil when the cluster has none: what the workloads
// pulling from that host without a login of their project's carry, and
// what the control plane resolves their images' digests with.
func (s *States) ClusterLogin(ctx context.Context, host string) (*contract.RegistryAuth, error) {
	logins, err := s.secrets.ListRegistryLogins(ctx)
	if err != nil {
		return nil, fmt.Errorf("registry logins: %w", err)
	}
	for _, l := range logins {
		if l.Host == host {
			return s.openLogin(l)
		}
	}
	return nil, nil
}
