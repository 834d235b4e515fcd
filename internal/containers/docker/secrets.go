package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"

	"github.com/hatchery/hatchery/internal/contract"
)

// secretStore keeps secret files: <dir>/<container name>/<secret name>, mode
// 0400, in directories of mode 0700, on a tmpfs so that no secret ever
// reaches a disk. Each container's files are bind-mounted read-only at
// /run/secrets/<name> and removed with the container.
type secretStore struct{ dir string }

func (e *Engine) secrets() secretStore { return secretStore{dir: e.cfg.SecretDir} }

func (s secretStore) init() error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("secret directory: %w", err)
	}
	if err := os.Chmod(s.dir, 0o700); err != nil {
		return fmt.Errorf("secret directory: %w", err)
	}
	return nil
}

// write writes a container's secret files and returns their paths by secret
// name. When user is numeric ("uid" or "uid:gid") the files are given to that
// user, who could not read a root-owned 0400 file otherwise; a named user is
// resolved inside the image, which the agent cannot do, so its files stay
// root's.
func (s secretStore) write(containerName string, secrets []contract.SecretFile, user string) (map[string]string, error) {
	if len(secrets) == 0 {
		return nil, nil
	}
	if !validSecretName(containerName) {
		// Joined into the path below: a name with a slash or ".." would
		// write outside the secret directory, where remove never looks.
		return nil, fmt.Errorf("write secrets: container name %q is not a single path element", containerName)
	}
	dir := filepath.Join(s.dir, containerName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("write secrets: %w", err)
	}
	uid, gid, chown := numericUser(user)
	paths := make(map[string]string, len(secrets))
	for _, sec := range secrets {
		if !validSecretName(sec.Name) {
			return nil, fmt.Errorf("write secrets: %q is not a valid secret name (a file name, no slash)", sec.Name)
		}
		p := filepath.Join(dir, sec.Name)
		if err := writeFile0400(p, []byte(sec.Value)); err != nil {
			return nil, fmt.Errorf("write secret %s: %w", sec.Name, err)
		}
		if chown {
			if err := os.Chown(p, uid, gid); err != nil {
				return nil, fmt.Errorf("write secret %s: %w", sec.Name, err)
			}
		}
		paths[sec.Name] = p
	}
	return paths, nil
}

// writeFile0400 writes a fresh file readable by its owner only. An existing
// file (a retried start) is replaced, never written through.
func writeFile0400(path string, data []byte) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o400)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// remove deletes a container's secret files; none is not an error.
func (s secretStore) remove(containerName string) error {
	if containerName == "" || !validSecretName(containerName) {
		return nil
	}
	if err := os.RemoveAll(filepath.Join(s.dir, containerName)); err != nil {
		return fmt.Errorf("remove secrets of %s: %w", containerName, err)
	}
	return nil
}

// owners returns the container names that have secret directories.
func (s secretStore) owners() ([]string, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("read secret directory: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

func validSecretName(n string) bool {
	return n != "" && n != "." && n != ".." && !strings.ContainsAny(n, "/\x00")
}

// numericUser parses "uid" or "uid:gid". Without a gid, gid is -1: the
// file's group is left as it is (the owner alone can read a 0400 file).
func numericUser(user string) (uid, gid int, ok bool) {
	if user == "" {
		return 0, 0, false
	}
	u, g, hasGroup := strings.Cut(user, ":")
	uid, err := strconv.Atoi(u)
	if err != nil || uid < 0 {
		return 0, 0, false
	}
	gid = -1 // leave the group as it is
	if hasGroup {
		if n, err := strconv.Atoi(g); err == nil && n >= 0 {
			gid = n
		}
	}
	return uid, gid, true
}

// sweepSecrets removes the secret directories of containers that no longer
// exist on this host: an agent killed between a container's removal and its
// secrets' removal leaves them behind.
func (e *Engine) sweepSecrets(ctx context.Context) error {
	owners, err := e.secrets().owners()
	if err != nil || len(owners) == 0 {
		return err
	}
	cctx, cancel := e.call(ctx)
	defer cancel()
	cs, err := e.api.ContainerList(cctx, container.ListOptions{All: true, Filters: e.ownedFilter()})
	if err != nil {
		return fmt.Errorf("sweep secrets: list containers: %w", err)
	}
	alive := map[string]bool{}
	for _, c := range cs {
		for _, n := range c.Names {
			alive[trimSlash(n)] = true
		}
	}
	var errs []error
	for _, o := range owners {
		if !alive[o] {
			errs = append(errs, e.secrets().remove(o))
		}
	}
	return errors.Join(errs...)
}
