package client

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/pki"
)

var fp = strings.Repeat("ab", 32)

func token(kind string) string { return pki.NewToken(kind, fp).String() }

func TestResolveTakesEachSettingFromTheFirstPlaceThatHasIt(t *testing.T) {
	flagTok, envTok, projTok, userTok := token("admin"), token("admin"), token("admin"), token("admin")
	type places struct {
		flags, env, project, user bool
	}
	tests := []struct {
		name       string
		server     places // where a server is given
		token      places
		wantServer string
		wantToken  string
	}{
		{"flags win over everything", places{true, true, true, true}, places{true, true, true, true}, "https://flag:1", flagTok},
		{"the environment wins over files", places{false, true, true, true}, places{false, true, true, true}, "https://env:1", envTok},
		{"./.hatch wins over the user's config", places{false, false, true, true}, places{false, false, true, true}, "https://project:1", projTok},
		{"the user's config is the last resort", places{false, false, false, true}, places{false, false, false, true}, "https://user:1", userTok},
		{"a flag server with a token from a file", places{true, false, false, true}, places{false, false, false, true}, "https://flag:1", userTok},
		{"an env token with the server of ./.hatch", places{false, false, true, true}, places{false, true, false, true}, "https://project:1", envTok},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			work, conf := t.TempDir(), t.TempDir()
			l := Lookup{WorkDir: work, ConfigDir: conf}
			env := map[string]string{}
			l.Getenv = func(k string) string { return env[k] }
			if tt.server.flags {
				l.Server = "https://flag:1"
			}
			if tt.token.flags {
				l.Token = flagTok
			}
			if tt.server.env {
				env[EnvServer] = "https://env:1"
			}
			if tt.token.env {
				env[EnvToken] = envTok
			}
			writeConfig(t, ProjectConfigPath(work), tt.server.project, "https://project:1", tt.token.project, projTok)
			writeConfig(t, UserConfigPath(conf), tt.server.user, "https://user:1", tt.token.user, userTok)
			got, err := l.Resolve()
			if err != nil {
				t.Fatal(err)
			}
			if got.Server != tt.wantServer || got.Token != tt.wantToken {
				t.Fatalf("Resolve = %s with token %s..., want %s with %s...", got.Server, got.Token[:20], tt.wantServer, tt.wantToken[:20])
			}
		})
	}
}

// writeConfig writes a config file with the settings asked for, if any.
func writeConfig(t *testing.T, path string, withServer bool, server string, withToken bool, tok string) {
	t.Helper()
	var cfg Config
	if withServer {
		cfg.Server = server
	}
	if withToken {
		cfg.Token = tok
	}
	if cfg == (Config{}) {
		return
	}
	if err := Save(path, cfg); err != nil {
		t.Fatal(err)
	}
}

func TestResolveNamesWhereItLookedAndNeverRepeatsAToken(t *testing.T) {
	work, conf := t.TempDir(), t.TempDir()
	_, err := Lookup{WorkDir: work, ConfigDir: conf}.Resolve()
	for _, want := range []string{"--server", EnvServer, "--token", EnvToken, ProjectConfigPath(work), UserConfigPath(conf)} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Resolve with nothing anywhere: %v; want it to mention %s", err, want)
		}
	}
	secret := "hatch-admin.s3cr3t-value"
	_, err = Lookup{Server: "https://x:1", Token: secret}.Resolve()
	if err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("Resolve of a malformed token: %v; want an error that does not repeat it", err)
	}
}

func TestSaveWritesAPrivateFileThatLoadReads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", ConfigFile)
	want := Config{Server: "https://127.0.0.1:7700", Token: token("admin")}
	if err := Save(path, want); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("config file mode %v (%v), want 0600", info.Mode(), err)
	}
	got, ok, err := Load(path)
	if err != nil || !ok || got != want {
		t.Fatalf("Load = %+v, %v, %v; want %+v", got, ok, err, want)
	}
	if _, ok, err := Load(filepath.Join(t.TempDir(), "none.json")); ok || err != nil {
		t.Fatalf("Load of a missing file = %v, %v; want not ok, no error", ok, err)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"token": "hatch-admin.s3cr3t`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(bad); err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("Load of a broken file: %v; want an error that does not quote it", err)
	}
}
