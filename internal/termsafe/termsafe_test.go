package termsafe

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"pgregory.net/rapid"
)

func TestControlCharactersAreShownNotActedOn(t *testing.T) {
	for _, c := range []struct{ name, in, line, text string }{
		{"plain text", "listening on :8080", "listening on :8080", "listening on :8080"},
		{"UTF-8 text and emoji", "café ✓ 日本 👩‍💻", "café ✓ 日本 👩‍💻", "café ✓ 日本 👩‍💻"},
		{"a backslash stays as it is", `C:\dir \x1b`, `C:\dir \x1b`, `C:\dir \x1b`},
		{"OSC 52 writes the clipboard", "\x1b]52;c;ZWNobyBwd25lZA==\a", `\x1b]52;c;ZWNobyBwd25lZA==\a`, `\x1b]52;c;ZWNobyBwd25lZA==\a`},
		{"OSC 0 retitles the terminal", "\x1b]0;owned\x1b\\", `\x1b]0;owned\x1b\`, `\x1b]0;owned\x1b\`},
		{"CSI clears the screen", "\x1b[2J\x1b[H", `\x1b[2J\x1b[H`, `\x1b[2J\x1b[H`},
		{"a lone CR rewrites the line", "ok\rFAKE", `ok\rFAKE`, `ok\rFAKE`},
		{"CRLF ends a line", "a\r\nb\r\n", `a\r\nb\r\n`, "a\nb\n"},
		{"newline and tab", "a\n\tb", `a\n\tb`, "a\n\tb"},
		{"NUL, backspace, bell, DEL", "\x00\b\a\x7f", `\x00\b\a\x7f`, `\x00\b\a\x7f`},
		{"C1 CSI as one UTF-8 rune", "x\u009b2Jy", `x\u009b2Jy`, `x\u009b2Jy`},
		{"bidi override", "abc\u202edcba\u2066", `abc\u202edcba\u2066`, `abc\u202edcba\u2066`},
		{"invalid UTF-8", "a\xff\xc3(b\xe2\x82", `a\xff\xc3(b\xe2\x82`, `a\xff\xc3(b\xe2\x82`},
		{"raw C1 byte", "a\x9bb", `a\x9bb`, `a\x9bb`},
	} {
		if got := Line(c.in); got != c.line {
			t.Errorf("%s: Line(%q) = %q, want %q", c.name, c.in, got, c.line)
		}
		if got := Text(c.in); got != c.text {
			t.Errorf("%s: Text(%q) = %q, want %q", c.name, c.in, got, c.text)
		}
	}
}

func TestLinesSplitsTheSafeText(t *testing.T) {
	got := Lines("panic: boom\r\n\tmain.go:12\x1b[2J")
	want := []string{"panic: boom", "\tmain.go:12\\x1b[2J"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("Lines = %q, want %q", got, want)
	}
}

// TestNothingATerminalActsOnGetsThrough checks, for any bytes at all, that
// what Line and Text return is valid UTF-8 without a control character or a
// bidi formatting character (Text: but newlines and tabs), and that a string
// with none of them comes back as it was.
func TestNothingATerminalActsOnGetsThrough(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := rapid.OneOf(
			rapid.StringMatching(`[\x00-\x{10ffff}]*`),
			rapid.Map(rapid.SliceOf(rapid.Byte()), func(b []byte) string { return string(b) }),
		).Draw(t, "in")
		for name, f := range map[string]func(string) string{"Line": Line, "Text": Text} {
			out := f(in)
			keep := name == "Text"
			if !utf8.ValidString(out) {
				t.Fatalf("%s(%q) = %q: not valid UTF-8", name, in, out)
			}
			for _, r := range out {
				if (unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)) && !(keep && (r == '\n' || r == '\t')) {
					t.Fatalf("%s(%q) = %q: holds %U", name, in, out, r)
				}
			}
			clean := utf8.ValidString(in) && !strings.ContainsFunc(in, func(r rune) bool {
				return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)
			})
			if clean && out != in {
				t.Fatalf("%s(%q) = %q: a string with nothing to escape was changed", name, in, out)
			}
		}
	})
}
