package store

import (
	"context"
	"time"
)

// RegistryLogin is a cluster-wide login to an image registry (`hatch
// registry login`): every egg pulling from Host without a login of its
// project's gets it.
type RegistryLogin struct {
	// Host is the registry's host[:port], as image references name it.
	Host     string
	Username string
	// Sealed is the password, sealed with the control plane's key: a copy
	// of the database alone does not reveal it.
	Sealed string
	// Fingerprint is a keyed hash of the password: the handle of the login
	// that desired states carry changes with it.
	Fingerprint string
	UpdatedAt   time.Time
}

// RegistryLogins keeps the cluster-wide registry logins, one per host.
type RegistryLogins interface {
	// PutRegistryLogin stores a login, replacing the host's.
	PutRegistryLogin(ctx context.Context, l RegistryLogin) error
	// DeleteRegistryLogin deletes the host's login: ErrNotFound if none.
	DeleteRegistryLogin(ctx context.Context, host string) error
	// ListRegistryLogins lists every login, by host.
	ListRegistryLogins(ctx context.Context) ([]RegistryLogin, error)
}
