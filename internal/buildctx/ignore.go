package buildctx

import (
	"bufio"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"
)

// Ignore is a parsed .dockerignore: the patterns in file order. The zero
// value excludes nothing.
//
// The rules are Docker's: a line is a pattern, "#" starts a comment line,
// blank lines are skipped, each pattern is cleaned (filepath.Clean) and
// anchored at the context's root (a leading "/" changes nothing). A pattern
// is matched segment by segment with path.Match, "**" matching any number of
// segments (none included). A pattern that matches a directory matches
// everything below it. "!" makes a pattern an exception. The last pattern
// that matches a path decides: excluded, or included by an exception.
type Ignore struct {
	patterns []pattern
}

type pattern struct {
	text      string   // as cleaned, for error messages
	segments  []string // split on "/"
	exception bool
}

// ParseIgnore reads a .dockerignore. It refuses a malformed pattern (one
// path.Match cannot read, such as "[a-"), naming its line, rather than
// packing a context the user did not mean.
func ParseIgnore(r io.Reader) (Ignore, error) {
	var ig Ignore
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		p := pattern{}
		if rest, ok := strings.CutPrefix(text, "!"); ok {
			p.exception = true
			text = strings.TrimSpace(rest)
		}
		text = filepath.ToSlash(filepath.Clean(text))
		text = strings.TrimLeft(text, "/")
		if text == "" || text == "." {
			continue // "/" or "." alone: Docker ignores such a line too
		}
		p.text = text
		p.segments = strings.Split(text, "/")
		for _, seg := range p.segments {
			if seg == "**" {
				continue
			}
			if _, err := path.Match(seg, ""); err != nil {
				return Ignore{}, fmt.Errorf(".dockerignore:%d: pattern %q: %w", line, text, err)
			}
		}
		ig.patterns = append(ig.patterns, p)
	}
	if err := sc.Err(); err != nil {
		return Ignore{}, fmt.Errorf("read .dockerignore: %w", err)
	}
	return ig, nil
}

// Excluded reports whether the path (slash-separated, relative to the
// context's root) is left out of the context.
func (ig Ignore) Excluded(rel string) bool {
	segments := strings.Split(rel, "/")
	excluded := false
	for _, p := range ig.patterns {
		if p.matchesOrParent(segments) {
			excluded = !p.exception
		}
	}
	return excluded
}

// Keep adds an exception for one path after every other pattern, so that
// the path is always included (Docker's CLI keeps the Dockerfile and
// .dockerignore this way: the builder needs them).
func (ig *Ignore) Keep(rel string) {
	rel = strings.TrimLeft(path.Clean(rel), "/")
	ig.patterns = append(ig.patterns, pattern{text: rel, segments: strings.Split(rel, "/"), exception: true})
}

// HasExceptions reports whether some pattern re-includes paths: only then
// may something inside an excluded directory be included, so only then must
// the packer look inside one.
func (ig Ignore) HasExceptions() bool {
	for _, p := range ig.patterns {
		if p.exception {
			return true
		}
	}
	return false
}

// matchesOrParent reports whether the pattern matches the path or one of
// its parent directories.
func (p pattern) matchesOrParent(segments []string) bool {
	for n := len(segments); n > 0; n-- {
		if matchSegments(p.segments, segments[:n]) {
			return true
		}
	}
	return false
}

// matchSegments matches a pattern's segments against a path's, "**"
// standing for zero or more path segments.
func matchSegments(pat, segs []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			rest := pat[1:]
			for skip := 0; skip <= len(segs); skip++ {
				if matchSegments(rest, segs[skip:]) {
					return true
				}
			}
			return false
		}
		if len(segs) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], segs[0]); !ok { // patterns were checked at parse
			return false
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0
}
