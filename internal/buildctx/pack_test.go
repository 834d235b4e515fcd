package buildctx

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestPackHonoursDockerignoreAndKeepsTheBuildFiles(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		".dockerignore":    "*\n!app\n!static\nstatic/*.map\n",
		"Dockerfile":       "FROM scratch\n",
		"app":              "binary",
		"main.go":          "package main",
		"static/index.htm": "<h1>hi</h1>",
		"static/app.map":   "{}",
		"tmp/scratch":      "x",
	})
	got := entryNames(t, packBytes(t, dir, ""))
	want := []string{".dockerignore", "Dockerfile", "app", "static/", "static/index.htm"}
	if !slices.Equal(got, want) {
		t.Fatalf("entries = %q, want %q", got, want)
	}
}

func TestPackKeepsAnotherNamedDockerfile(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{".dockerignore": "build\n", "build/Dockerfile.prod": "FROM scratch\n", "build/notes": "x"})
	got := entryNames(t, packBytes(t, dir, "build/Dockerfile.prod"))
	want := []string{".dockerignore", "build/Dockerfile.prod"}
	if !slices.Equal(got, want) {
		t.Fatalf("entries = %q, want %q", got, want)
	}
}

func TestPackNormalisesMetadataButKeepsTheExecutableBit(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"run.sh": "#!/bin/sh", "data": "d"})
	if err := os.Chmod(filepath.Join(dir, "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("data", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(packBytes(t, dir, "")))
	modes := map[string]int64{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(time.Unix(0, 0)) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: mtime %v, owner %d:%d %q:%q; want all zero", h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		if h.Name == "link" && (h.Typeflag != tar.TypeSymlink || h.Linkname != "data") {
			t.Errorf("link packed as type %c to %q, want a symlink to data", h.Typeflag, h.Linkname)
		}
		modes[h.Name] = h.Mode
	}
	if modes["run.sh"] != 0o755 || modes["data"]&0o111 != 0 {
		t.Errorf("modes: run.sh %o, data %o; want run.sh 755 and data not executable", modes["run.sh"], modes["data"])
	}
}

func TestPackReturnsTheFilesDigestAndSize(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"Dockerfile": "FROM scratch\n", "a": "aaa"})
	a, err := Pack(dir, "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	content, err := os.ReadFile(a.Path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(content)
	if a.Digest != "sha256:"+hex.EncodeToString(sum[:]) || a.Size != int64(len(content)) {
		t.Fatalf("archive %+v, but the file has %d bytes hashing to %x", a, len(content), sum)
	}
	if !bytes.Equal(content, packBytes(t, dir, "")) {
		t.Fatal("Pack's file differs from Write's output")
	}
}

func TestPackRefusesWhatIsNotADirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	writeFiles(t, filepath.Dir(file), map[string]string{"f": ""})
	for _, dir := range []string{file, filepath.Join(t.TempDir(), "missing")} {
		if _, err := Pack(dir, "", t.TempDir()); err == nil {
			t.Errorf("Pack(%s) succeeded", dir)
		}
	}
}

// TestPackIsDeterministic: the same tree, written in another order with
// other times, packs to the same bytes, and a change of one file's content
// changes them.
func TestPackIsDeterministic(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		names := rapid.SliceOfNDistinct(rapid.StringMatching(`[a-c]{1,2}(/[a-c]{1,2}){0,2}`), 1, 8, rapid.ID[string]).Draw(rt, "names")
		files := map[string]string{}
		for _, n := range names {
			if conflicts(files, n) {
				continue
			}
			files[n] = rapid.StringMatching(`[a-z]{0,20}`).Draw(rt, "content")
		}
		order := rapid.Permutation(sortedKeys(files)).Draw(rt, "order")

		first, second := t.TempDir(), t.TempDir()
		writeFilesInOrder(t, first, files, sortedKeys(files), time.Unix(1_000_000, 0))
		writeFilesInOrder(t, second, files, order, time.Unix(2_000_000, 0))
		a, b := packBytes(t, first, ""), packBytes(t, second, "")
		if !bytes.Equal(a, b) {
			rt.Fatalf("the same tree packed to different bytes (%d and %d)", len(a), len(b))
		}

		changed := rapid.SampledFrom(sortedKeys(files)).Draw(rt, "changed")
		files[changed] += "!"
		writeFilesInOrder(t, second, files, []string{changed}, time.Unix(2_000_000, 0))
		if bytes.Equal(a, packBytes(t, second, "")) {
			rt.Fatalf("changing %s left the archive the same", changed)
		}
	})
}

// conflicts reports whether name is a file under another file or a
// directory of one, which a tree cannot hold.
func conflicts(files map[string]string, name string) bool {
	for other := range files {
		if strings.HasPrefix(name, other+"/") || strings.HasPrefix(other, name+"/") {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	writeFilesInOrder(t, dir, files, sortedKeys(files), time.Now())
}

func writeFilesInOrder(t *testing.T, dir string, files map[string]string, order []string, mtime time.Time) {
	t.Helper()
	for _, name := range order {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(files[name]), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
}

func packBytes(t *testing.T, dir, dockerfile string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, dir, dockerfile); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func entryNames(t *testing.T, archive []byte) []string {
	t.Helper()
	var names []string
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
}
