// Package client is the CLI's way to the control plane: where it finds the
// server and its token (Lookup), and the typed calls of the API an operator
// makes (Client), one sub-client per family of routes as docs/API.md groups
// them: c.Projects().Apply(...), c.Hosts().List(...).
//
// The connection itself (finding a server that answers, pinning its
// certificate by the token, authenticating) is apiclient's, which the agent
// uses too: this package is the commands' layer over it.
package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/hatchery/hatchery/internal/fsutil"
	"github.com/hatchery/hatchery/internal/pki"
)

// Config is a server and the token to present to it.
type Config struct {
	// Server is the base URL, "https://host:port"; several servers of one
	// control plane are comma-separated, and tried in order.
	Server string `json:"server"`
	// Token is "hatch-<kind>.<secret>.<ca-fingerprint>".
	Token string `json:"token"`
}

// The environment variables Lookup reads.
const (
	EnvServer = "HATCH_SERVER"
	EnvToken  = "HATCH_TOKEN"
)

// ConfigFile is the name of the config file in both config directories:
// ./.hatch/config.json (written by `hatch up`) and
// <user config dir>/hatch/config.json (written by `hatch server`).
const ConfigFile = "config.json"

// ProjectConfigPath is the config file of the working directory dir.
func ProjectConfigPath(dir string) string { return filepath.Join(dir, ".hatch", ConfigFile) }

// UserConfigPath is the user's config file under configDir (os.UserConfigDir:
// $XDG_CONFIG_HOME or ~/.config on Linux).
func UserConfigPath(configDir string) string { return filepath.Join(configDir, "hatch", ConfigFile) }

// Lookup says where to look for the server and the token, first to last:
// the flags, the environment, the working directory's ./.hatch, the user's
// config directory. Each setting is taken from the first place that has it.
type Lookup struct {
	// Server and Token are the --server and --token flags ("" when not given).
	Server, Token string
	// Getenv reads the environment (nil: nothing is set).
	Getenv func(string) string
	// WorkDir holds ./.hatch ("" to skip it).
	WorkDir string
	// ConfigDir is the user's config directory ("" to skip it).
	ConfigDir string
}

// DefaultLookup is the lookup of the CLI: the process's environment,
// working directory and user config directory, and the given flags.
func DefaultLookup(serverFlag, tokenFlag string) Lookup {
	wd, _ := os.Getwd()                // "" skips ./.hatch
	configDir, _ := os.UserConfigDir() // "" skips it, as for a daemon without a home
	return Lookup{Server: serverFlag, Token: tokenFlag, Getenv: os.Getenv, WorkDir: wd, ConfigDir: configDir}
}

// Resolve finds the server and the token. It names, in its error, every
// place it looked for what it did not find; the error never repeats a token.
func (l Lookup) Resolve() (Config, error) {
	getenv := l.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	cfg := Config{Server: l.Server, Token: l.Token}
	if cfg.Server == "" {
		cfg.Server = getenv(EnvServer)
	}
	if cfg.Token == "" {
		cfg.Token = getenv(EnvToken)
	}
	var files []string
	if l.WorkDir != "" {
		files = append(files, ProjectConfigPath(l.WorkDir))
	}
	if l.ConfigDir != "" {
		files = append(files, UserConfigPath(l.ConfigDir))
	}
	for _, path := range files {
		if cfg.Server != "" && cfg.Token != "" {
			break
		}
		f, ok, err := Load(path)
		if err != nil {
			return Config{}, err
		}
		if !ok {
			continue
		}
		if cfg.Server == "" {
			cfg.Server = f.Server
		}
		if cfg.Token == "" {
			cfg.Token = f.Token
		}
	}
	var missing []string
	if cfg.Server == "" {
		missing = append(missing, "server (--server or "+EnvServer+")")
	}
	if cfg.Token == "" {
		missing = append(missing, "token (--token or "+EnvToken+")")
	}
	if len(missing) > 0 {
		where := "no config file"
		if len(files) > 0 {
			where = "nor in " + strings.Join(files, " or ")
		}
		return Config{}, fmt.Errorf("no %s given, %s; `hatch server` writes %s on its machine",
			strings.Join(missing, " and no "), where, UserConfigPath("~/.config"))
	}
	if _, err := pki.ParseToken(cfg.Token); err != nil {
		return Config{}, fmt.Errorf("the token: %w", err)
	}
	return cfg, nil
}

// Load reads a config file; ok is false when there is none.
func Load(path string) (cfg Config, ok bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Config{}, false, nil
	}
	if err != nil {
		return Config{}, false, fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		// The JSON error is not repeated: it may quote the token.
		return Config{}, false, fmt.Errorf("%s: not a hatch config (want {\"server\": ..., \"token\": ...})", path)
	}
	return cfg, true, nil
}

// Save writes a config file atomically, mode 0600 (it holds a token), making
// its directory (0700) if needed.
func Save(path string, cfg Config) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("config dir: %w", err)
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(path, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
