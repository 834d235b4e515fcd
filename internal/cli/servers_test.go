package cli

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/client"
)

// The CLI given several servers, the first dead, goes on to the next: by
// repeated --server, by a comma-separated one, by HATCH_SERVER and by the
// config file.
func TestTheCLIGoesOnToTheNextServer(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.json")
	var logs lockedBuffer
	startServerProc(t, &logs, "--data-dir", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0", "--cli-config", cfgPath)
	var cfg client.Config
	eventually(t, 30*time.Second, "the server wrote its CLI config", func() bool {
		var ok bool
		var err error
		cfg, ok, err = client.Load(cfgPath)
		return err == nil && ok
	})
	dead := "https://" + freeAddr(t)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "none"))
	t.Chdir(dir)
	for _, c := range []struct {
		name string
		args []string
		env  string
		file bool
	}{
		{name: "repeated --server", args: []string{"--server", dead, "--server", cfg.Server, "--token", cfg.Token}},
		{name: "one --server, comma-separated", args: []string{"--server", dead + "," + cfg.Server, "--token", cfg.Token}},
		{name: client.EnvServer, env: dead + "," + cfg.Server},
		{name: "the config file", file: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(client.EnvServer, c.env)
			t.Setenv(client.EnvToken, "")
			if c.env != "" {
				t.Setenv(client.EnvToken, cfg.Token)
			}
			if c.file {
				if err := client.Save(client.ProjectConfigPath(dir), client.Config{Server: dead + "," + cfg.Server, Token: cfg.Token}); err != nil {
					t.Fatal(err)
				}
			}
			code, out, errOut := run(t, append([]string{"hosts"}, c.args...)...)
			if code != 0 || strings.Contains(errOut, "cannot reach") {
				t.Fatalf("hatch hosts = %d\n%s\n%s", code, out, errOut)
			}
		})
	}
}
