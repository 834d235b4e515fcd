package serverd

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/fsutil"
	"github.com/hatchery/hatchery/internal/notify"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

// notifyKeyFile keeps the secret that signs the webhooks, made at the
// first start (or by `hatch server init`, so that every server of one
// control plane signs alike) unless --notify-secret-file names another.
const notifyKeyFile = "notify.key"

// Notify configures the webhooks (package notify).
type Notify struct {
	// Targets get every project's notified events (--notify URL for JSON,
	// --notify-slack URL for a Slack-compatible body; each repeatable).
	Targets []inputs.NotifyTarget
	// SecretFile holds the signing secret (--notify-secret-file; default
	// <data-dir>/notify.key, made if missing).
	SecretFile string
}

// check refuses a target before the server makes any state.
func (n Notify) check() error {
	var errs []error
	for _, t := range n.Targets {
		if err := inputs.CheckNotifyTarget(t); err != nil {
			flag := "--notify"
			if t.Format == inputs.NotifySlack {
				flag = "--notify-slack"
			}
			errs = append(errs, fmt.Errorf("%s: %w", flag, err))
		}
	}
	return errors.Join(errs...)
}

// NotifySecret returns the webhooks' signing secret: secretFile's, or the
// data dir's notify.key, made at the first call if create is set. The
// secret is the file's text, trimmed, as receivers are given it.
func NotifySecret(dataDir, secretFile string, create bool) ([]byte, error) {
	path, flag := secretFile, "--notify-secret-file"
	if path == "" {
		path, flag = filepath.Join(dataDir, notifyKeyFile), "--data-dir"
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && create && secretFile == "" {
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		secret := hex.EncodeToString(key)
		if err := fsutil.WriteFileAtomic(path, []byte(secret+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("%s: write the notifications' key: %w", flag, err)
		}
		return []byte(secret), nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: the notifications' key: %w", flag, err)
	}
	secret := strings.TrimSpace(string(data))
	if len(secret) < 16 {
		return nil, fmt.Errorf("%s: the notifications' key in %s is shorter than 16 characters", flag, path)
	}
	return []byte(secret), nil
}

// NotifyKey is what `hatch server notify-key` prints: the key the server's
// --notify targets verify deliveries with, or with project
// ("<namespace>/<name>") the key of that project's own notify: targets.
func NotifyKey(dataDir, secretFile, project string) (string, error) {
	secret, err := NotifySecret(dataDir, secretFile, false)
	if err != nil {
		return "", err
	}
	if project == "" {
		return string(secret), nil
	}
	if ns, name, ok := strings.Cut(project, "/"); !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", fmt.Errorf("--project %q: write NAMESPACE/NAME (default/shop)", project)
	}
	return string(notify.ProjectKey(secret, project)), nil
}

// newNotify makes the notifications' service over the store and the
// projects' own targets.
func newNotify(c Notify, dataDir string, st controlStore, projects notify.ProjectTargets, log *zap.Logger) (*notify.Service, error) {
	secret, err := NotifySecret(dataDir, c.SecretFile, true)
	if err != nil {
		return nil, err
	}
	cfg := notify.DefaultConfig()
	cfg.Targets, cfg.Secret = c.Targets, secret
	return notify.New(cfg, notify.Deps{Events: st, Cursor: st, Projects: projects, Logger: log, Now: time.Now})
}
