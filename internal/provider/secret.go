package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/cenkalti/backoff/v4"

	"github.com/hatchery/hatchery/internal/desired"
	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/seal"
	"github.com/hatchery/hatchery/internal/store"
)

// FingerprintInput is the secret input that carries the keyed hash of the
// value the CLI sent: a new value changes it, so the secret updates, its handle
// changes, and so do the spec hashes of the eggs using it.
const FingerprintInput = "fingerprint"

// Fingerprint returns the keyed hash of a secret value that its handle and
// inputs carry: 32 hex digits of seal.Box.Fingerprint, which reveals nothing
// of the value without the server's key.
func Fingerprint(box *seal.Box, value []byte) string {
	fp := strings.TrimPrefix(box.Fingerprint(value), "hmac-sha256:")
	return fp[:32]
}

// StageSecret stores a secret's value, sealed, under its fingerprint, and
// returns the fingerprint for the secret's inputs. The value is staged when a
// plan is made, so that applying the plan needs nothing more from the client;
// values not used are pruned after the Set's SecretGrace.
func (s *Set) StageSecret(ctx context.Context, project, name string, value []byte) (string, error) {
	fp := Fingerprint(s.box, value)
	err := s.secrets.PutSecretValue(ctx, store.SecretValue{Project: project, Name: name, Fingerprint: fp,
		Sealed: s.box.Seal(value), Created: s.now()})
	if err != nil {
		return "", err
	}
	return fp, nil
}

// secretProvider records secrets; their values were staged with the plan.
type secretProvider struct{ s *Set }

func (secretProvider) Schema() reconciler.Schema {
	return reconciler.Schema{Outputs: outputsOf(resource.Secret)}
}

func (secretProvider) Diff(deployed, desired map[string]any) []string {
	return reconciler.DiffInputs(deployed, desired)
}

func (p secretProvider) Create(ctx context.Context, project string, r *resource.Deployed) (map[string]any, error) {
	return p.use(ctx, project, r, "")
}

func (p secretProvider) Update(ctx context.Context, project string, prev, next *resource.Deployed) (map[string]any, error) {
	old, _ := prev.Inputs[FingerprintInput].(string)
	return p.use(ctx, project, next, old)
}

// use checks that the value r's inputs name is stored, prunes the values no
// longer needed (the previous one is kept: auto-revert may put it back), and
// returns the handle.
func (p secretProvider) use(ctx context.Context, project string, r *resource.Deployed, previous string) (map[string]any, error) {
	fp, _ := r.Inputs[FingerprintInput].(string)
	if fp == "" {
		return nil, backoff.Permanent(fmt.Errorf("secret %s: no value was sent with the plan", r.Name))
	}
	_, err := p.s.secrets.SecretValue(ctx, project, r.Name, fp)
	if errors.Is(err, store.ErrNotFound) {
		return nil, backoff.Permanent(fmt.Errorf("secret %s: its value is not stored (plan again, sending it)", r.Name))
	}
	if err != nil {
		return nil, err
	}
	keep := []string{fp}
	if previous != "" {
		keep = append(keep, previous)
	}
	if err := p.s.secrets.PruneSecretValues(ctx, project, r.Name, keep, p.s.now().Add(-p.s.grace)); err != nil {
		return nil, err
	}
	return map[string]any{inputs.OutputHandle: desired.SecretHandle(r.Name, r.ID, fp)}, nil
}

// Delete forgets every value of the secret.
func (p secretProvider) Delete(ctx context.Context, project string, r *resource.Deployed) error {
	return p.s.secrets.DeleteSecretValues(ctx, project, r.Name)
}

func (secretProvider) Ready(context.Context, string, *resource.Deployed, resource.Condition) (bool, string, error) {
	return true, "", nil
}
