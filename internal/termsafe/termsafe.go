// Package termsafe makes text that Hatchery did not write (a container's log
// lines, a rollout's reason, an event's message) safe to print on an
// operator's terminal. A container's output printed raw could retitle the
// terminal, move the cursor to rewrite earlier lines, clear the screen or
// write the clipboard (OSC 52): every control character, and every byte that
// is not valid UTF-8, is shown instead as a visible escape (`\x1b`, `\r`,
// `\u009b`, `\xff`). Valid printable UTF-8 comes back untouched, and so does
// a string that needs nothing escaped (no copy).
//
// It is applied where text is rendered, never to what the API stores or
// returns: the JSON strings stay as they were sent.
package termsafe

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Line returns s as one line of output (a table cell, a message after a
// prefix): every control character is escaped, newlines and tabs included,
// so that the text can neither break the line nor shift a column.
func Line(s string) string { return escape(s, false) }

// Text returns s as a block of lines: newlines and tabs are kept (a "\r\n"
// ends a line as "\n" does), and every other control character is escaped,
// a lone "\r" included, since it would let a line overwrite itself.
func Text(s string) string { return escape(s, true) }

// Lines splits s into the lines Text shows, for a caller that prefixes
// each one (a log tail printed as "  | line").
func Lines(s string) []string { return strings.Split(Text(s), "\n") }

func escape(s string, text bool) string {
	i := firstUnsafe(s, text)
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			writeByte(&b, s[i])
		case text && r == '\r' && strings.HasPrefix(s[i+1:], "\n"):
			// "\r\n" is a line end as "\n" is: the "\n" is written next.
		case text && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case unsafe(r):
			writeRune(&b, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// firstUnsafe returns the index of the first byte of s that Line (or Text)
// changes, or len(s).
func firstUnsafe(s string, text bool) int {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if (c < 0x20 || c == 0x7f) && !(text && (c == '\n' || c == '\t')) {
				return i
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || unsafe(r) {
			return i
		}
		i += size
	}
	return len(s)
}

// unsafe says whether a rune must be escaped: the C0 and C1 controls and DEL
// (which terminals act on), and the bidirectional formatting characters
// (which reorder what is shown around them).
func unsafe(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)
}

// named are the usual short escapes, as Go writes them.
var named = map[rune]string{
	'\a': `\a`, '\b': `\b`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`, '\v': `\v`,
}

const hexDigits = "0123456789abcdef"

func writeRune(b *strings.Builder, r rune) {
	if n, ok := named[r]; ok {
		b.WriteString(n)
		return
	}
	if r < utf8.RuneSelf {
		writeByte(b, byte(r))
		return
	}
	b.WriteString(`\u`)
	for shift := 12; shift >= 0; shift -= 4 {
		b.WriteByte(hexDigits[(r>>shift)&0xf])
	}
}

// writeByte writes `\xHH`: an ASCII control, or a byte that is not UTF-8.
func writeByte(b *strings.Builder, c byte) {
	b.WriteString(`\x`)
	b.WriteByte(hexDigits[c>>4])
	b.WriteByte(hexDigits[c&0xf])
}
