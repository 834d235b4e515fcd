// Package buildctx packs an egg's build directory into the archive the
// control plane stores as a source blob and the agent hands to the Docker
// Engine's build: a tar of the directory, less what its .dockerignore
// excludes.
//
// The archive is deterministic: the same files with the same content, mode
// and layout give the same bytes, whatever their modification times, owners
// or the order the file system lists them in. Its digest is therefore a
// fingerprint of the context, which is what lets `hatch apply` skip uploading
// a context the server already has, and leaves the egg's spec (and its
// containers) alone when nothing in the context changed.
package buildctx

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// epoch is the modification time of every entry: times are left out so that
// a fresh checkout or a rebuilt but identical binary packs the same.
var epoch = time.Unix(0, 0).UTC()

// Archive is a packed build context, kept in a temporary file until the
// caller removes it.
type Archive struct {
	Path   string // the tar file
	Digest string // "sha256:<hex>" of the file's content
	Size   int64
}

// Pack writes the context in dir into a new file under tmpDir ("" for the
// system's) and returns it with its digest. dockerfile is the Dockerfile's
// path relative to dir ("" for "Dockerfile"): it and .dockerignore are always
// packed, as Docker's CLI does, because the builder needs them.
func Pack(dir, dockerfile, tmpDir string) (Archive, error) {
	f, err := os.CreateTemp(tmpDir, "hatch-context-*.tar")
	if err != nil {
		return Archive{}, fmt.Errorf("pack %s: %w", dir, err)
	}
	keep := false
	defer func() {
		if !keep {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	h := sha256.New()
	counter := &countingWriter{w: io.MultiWriter(f, h)}
	if err := Write(counter, dir, dockerfile); err != nil {
		return Archive{}, err
	}
	if err := f.Close(); err != nil {
		return Archive{}, fmt.Errorf("pack %s: %w", dir, err)
	}
	keep = true
	return Archive{Path: f.Name(), Digest: "sha256:" + hex.EncodeToString(h.Sum(nil)), Size: counter.n}, nil
}

// Write writes the deterministic tar of the context in dir to w.
//
// Entries come in lexical order of their paths (as filepath.WalkDir gives
// them), with modification time zero, owner 0:0 and no owner names; modes
// keep their permission bits, so an executable stays executable. Symbolic
// links are packed as links, never followed. Sockets, pipes and devices are
// skipped: they cannot be part of an image's files.
func Write(w io.Writer, dir, dockerfile string) error {
	info, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("build context: %w", err)
	}
	if !info.IsDir() {
		return fmt.Errorf("build context %s is not a directory", dir)
	}
	ignore, err := readIgnore(dir)
	if err != nil {
		return err
	}
	if dockerfile == "" {
		dockerfile = "Dockerfile"
	}
	// Kept the way Docker's CLI keeps them: as exceptions after the file's
	// patterns. A pattern can hold glob characters, a file name can too:
	// escape them so that the exception names only this file.
	ignore.Keep(".dockerignore")
	ignore.Keep(escapeGlob(filepath.ToSlash(dockerfile)))

	tw := tar.NewWriter(w)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if ignore.Excluded(rel) {
			if d.IsDir() && !ignore.HasExceptions() {
				return filepath.SkipDir // nothing below can come back
			}
			return nil
		}
		return writeEntry(tw, p, rel, d)
	})
	if err != nil {
		return fmt.Errorf("pack %s: %w", dir, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("pack %s: %w", dir, err)
	}
	return nil
}

// escapeGlob makes a file name match itself only as a path.Match pattern.
func escapeGlob(name string) string {
	var b strings.Builder
	for _, r := range name {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func readIgnore(dir string) (Ignore, error) {
	f, err := os.Open(filepath.Join(dir, ".dockerignore"))
	if errors.Is(err, fs.ErrNotExist) {
		return Ignore{}, nil
	}
	if err != nil {
		return Ignore{}, fmt.Errorf("build context: %w", err)
	}
	defer f.Close()
	ig, err := ParseIgnore(f)
	if err != nil {
		return Ignore{}, fmt.Errorf("%s: %w", dir, err)
	}
	return ig, nil
}

// writeEntry writes one file, directory or link with normalised metadata.
func writeEntry(tw *tar.Writer, p, rel string, d fs.DirEntry) error {
	info, err := d.Info()
	if err != nil {
		return err
	}
	hdr := &tar.Header{
		Name:    rel,
		Mode:    int64(info.Mode().Perm()),
		ModTime: epoch,
	}
	switch mode := info.Mode(); {
	case mode.IsRegular():
		hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
	case mode.IsDir():
		hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
	case mode&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, filepath.ToSlash(target)
	default:
		return nil // sockets, pipes, devices
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if hdr.Typeflag != tar.TypeReg {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	// CopyN: a file that grows while being packed must not overrun its header.
	if _, err := io.CopyN(tw, f, hdr.Size); err != nil {
		return fmt.Errorf("%s: %w (did it change while being packed?)", rel, err)
	}
	return nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}
