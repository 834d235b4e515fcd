// Package fsutil holds the one way Hatchery writes state that must survive a
// crash (atomically), and the one way it makes a data directory private.
package fsutil

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// WriteFileAtomic writes data to path through a temporary file in the same
// directory, fsynced, renamed over path, then the directory fsynced: readers
// and a restart after a crash see the old content or the new, never a part.
// A process killed between the temporary file's creation and the rename
// leaves it behind: RemoveTemps sweeps such files at the next start.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, tempPrefix(filepath.Base(path))+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// tempPrefix is how the temporary files of WriteFileAtomic for the file
// name begin: hidden, and named after the file they stand in for.
func tempPrefix(name string) string { return "." + name + ".tmp-" }

// RemoveTemps removes from dir the temporary files WriteFileAtomic left
// there for the files named (names, not paths), and returns the paths it
// removed. Each killed write leaves one, as big as the file it was to
// replace: on a small disk (a full data dir is when writes fail and
// processes get killed) they would eat the space the next write needs.
// Call it at start, before anything writes the named files: a write in
// flight would lose its temporary file and fail. Other files are left
// alone, and a missing dir holds nothing to remove.
func RemoveTemps(dir string, names ...string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sweep temporary files: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		for _, name := range names {
			if !strings.HasPrefix(e.Name(), tempPrefix(name)) {
				continue
			}
			path := filepath.Join(dir, e.Name())
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			} else {
				removed = append(removed, path)
			}
			break
		}
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("sweep temporary files: %w", err)
	}
	return removed, nil
}

// PrivateDir makes dir a data directory only its owner can enter (0700): the
// control plane's holds the database, keys and tokens, an agent's its host
// token. A missing one is made (with its parents) 0700 whatever the umask.
// An existing one open to group or others is tightened only when it is
// Hatchery's: empty, or holding one of marks, the files Hatchery writes
// there. Any other (a home, /tmp, a project) is left as it is and refused
// with an error naming it, since changing its mode would break what else
// lives there.
func PrivateDir(dir string, marks ...string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		return os.Chmod(dir, 0o700) // the umask may have taken bits MkdirAll asked for
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	case fi.Mode().Perm()&0o077 == 0:
		return nil
	}
	ours, err := holdsAny(dir, marks)
	if err != nil {
		return err
	}
	if !ours {
		return fmt.Errorf("%s is open to group or others (mode %04o) and holds none of Hatchery's files (%s): "+
			"its mode is left alone; use a new or empty directory, or make this one private yourself (chmod 700 %s)",
			dir, fi.Mode().Perm(), strings.Join(marks, ", "), dir)
	}
	return os.Chmod(dir, 0o700)
}

// holdsAny says whether dir is empty or holds one of names.
func holdsAny(dir string, names []string) (bool, error) {
	for _, name := range names {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return true, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return false, err
		}
	}
	d, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer d.Close()
	if _, err := d.Readdirnames(1); errors.Is(err, io.EOF) {
		return true, nil
	} else if err != nil {
		return false, err
	}
	return false, nil
}
