package spec

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The trap this file explains: in a YAML flow collection ({...} or [...]),
// "{" and "}" are indicators, so an unquoted ${secret.crt} there is not a
// scalar but "$" followed by a mapping, and the parser answers "did not find
// expected ',' or '}'", a message that names neither the cause nor the fix.
// In block style (cert: ${secret.crt} on its own line) a "{" inside a scalar
// is text, so the trap is only in flow collections, where Compose files meet
// it too. Both the hatch.yaml loader and the Compose loader (whose files
// hold ${VAR}) turn that parser error into one that shows the quoted form.

// flowReference is a ${...} written unquoted inside a flow collection.
type flowReference struct {
	line     int    // the line it is on, from 1
	ref      string // the reference as written, "${secret.crt}"
	open     byte   // the innermost collection: '{' or '['
	fix      string // the entry rewritten with its scalar quoted: cert: "${secret.crt}"
	from, to int    // the plain scalar holding it, as offsets of the text scanned
	quoted   string // that scalar in double quotes
}

// String is the explanation, naming the reference and its quoted form.
func (r flowReference) String() string {
	kind := "{...}"
	if r.open == '[' {
		kind = "[...]"
	}
	return fmt.Sprintf("%s inside %s must be quoted: %s", r.ref, kind, r.fix)
}

// ExplainFlowReference tells whether the YAML parser refuses data because of
// a ${...} written unquoted inside a flow collection. If so, it returns the
// line (from 1) of that reference and a message showing the fix:
// `${secret.crt} inside {...} must be quoted: cert: "${secret.crt}"`.
//
// It does not trust the line of the parser's error, which for a collection
// spread over several lines is where the collection opens, nor its words,
// which are those of any unbalanced collection: it quotes the references it
// finds, one after the other, and parses again. The first reference explains
// the error if quoting the references makes that error go away or become
// another (a later problem of the file); if the same error stays, the file
// has a problem of its own before them and the parser's message is the
// right one. It runs only on a file the parser refused, and parses it at
// most once per reference found, for the first maxFlowReferences of them.
func ExplainFlowReference(data []byte) (line int, message string, ok bool) {
	text := strings.ReplaceAll(string(data), "\r\n", "\n")
	before := yamlError(text)
	if before == "" {
		return 0, "", false
	}
	first, found := firstFlowReference(text)
	if !found {
		return 0, "", false
	}
	r := first
	for range maxFlowReferences {
		text = text[:r.from] + r.quoted + text[r.to:]
		if yamlError(text) != before {
			return first.line, first.String(), true
		}
		if r, found = firstFlowReference(text); !found {
			break
		}
	}
	return 0, "", false
}

// maxFlowReferences bounds the parses of a refused file ExplainFlowReference
// makes: a file with more unquoted references than that, none of which
// changes the parser's error, keeps the parser's message.
const maxFlowReferences = 100

// yamlError is the parser's error for text, "" if it parses.
func yamlError(text string) string {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		return err.Error()
	}
	return ""
}

// flowFrame is one open flow collection.
type flowFrame struct {
	open byte   // '{' or '['
	key  string // in a mapping, the key of the value being read ("" before ':')
}

// firstFlowReference scans data as far as YAML's lexical rules matter here:
// comments, quoted scalars, block scalars, and the nesting of flow
// collections. It is not a YAML parser; it only has to find, in a document
// the parser refused, the first "${" that the parser read as "$" and "{".
func firstFlowReference(text string) (flowReference, bool) {
	s := flowScan{}
	offset := 0
	for n, line := range strings.Split(text, "\n") {
		if r, ok := s.line(n+1, line); ok {
			r.from += offset
			r.to += offset
			return r, true
		}
		offset += len(line) + 1
	}
	return flowReference{}, false
}

// flowScan is the state carried from one line to the next.
type flowScan struct {
	stack []flowFrame
	// quote is the quote character of a quoted scalar continued on the next
	// line, 0 if none.
	quote byte
	// inBlock is set inside a block scalar (| or >), whose content lines are
	// those indented beyond blockIndent, the column of the key or "-" it
	// belongs to.
	inBlock     bool
	blockIndent int
}

// line scans one line; it returns the first trapped reference it finds.
func (s *flowScan) line(n int, text string) (flowReference, bool) {
	indent := len(text) - len(strings.TrimLeft(text, " "))
	if s.inBlock {
		if strings.TrimSpace(text) == "" || indent > s.blockIndent {
			return flowReference{}, false
		}
		s.inBlock = false
	}
	i := 0
	if s.quote != 0 {
		end, closed := skipQuoted(text, 0, s.quote)
		if !closed {
			return flowReference{}, false
		}
		s.quote, i = 0, end
		if len(s.stack) == 0 {
			return flowReference{}, false // a multi-line quoted scalar in block context: its line is done
		}
	}
	if len(s.stack) == 0 {
		var ok bool
		if i, ok = s.block(text, indent); !ok {
			return flowReference{}, false
		}
	}
	return s.flow(n, text, i)
}

// block reads the nodes of a line in block context and returns where a flow
// collection starts, if one does.
func (s *flowScan) block(text string, indent int) (int, bool) {
	i, node := indent, indent
	for {
		for i < len(text) && (text[i] == ' ' || text[i] == '\t') {
			i++
		}
		if i >= len(text) || text[i] == '#' {
			return 0, false
		}
		switch c := text[i]; {
		case (c == '-' || c == '?') && (i+1 == len(text) || text[i+1] == ' '):
			node = i
			i++
		case c == '&' || c == '!' || c == '*':
			for i < len(text) && text[i] != ' ' {
				i++
			}
		case c == '{' || c == '[':
			return i, true
		case c == '|' || c == '>':
			s.inBlock, s.blockIndent = true, node
			return 0, false
		case c == '"' || c == '\'':
			end, closed := skipQuoted(text, i+1, c)
			if !closed {
				s.quote = c
				return 0, false
			}
			j := end
			for j < len(text) && text[j] == ' ' {
				j++
			}
			if j < len(text) && text[j] == ':' {
				node, i = i, j+1
				continue
			}
			return 0, false
		default:
			// A plain scalar: a key if ": " follows, else a value to the end.
			k := plainKeyEnd(text, i)
			if k < 0 {
				return 0, false
			}
			node, i = i, k+1
		}
	}
}

// plainKeyEnd returns the index of the ':' that ends a plain key starting at
// i in block context, or -1 if the scalar is a value.
func plainKeyEnd(text string, i int) int {
	for j := i; j < len(text); j++ {
		switch {
		case text[j] == '#' && text[j-1] == ' ':
			return -1
		case text[j] == ':' && (j+1 == len(text) || text[j+1] == ' ' || text[j+1] == '\t'):
			return j
		}
	}
	return -1
}

// skipQuoted returns the index after the quote closing a scalar whose
// content starts at i, and whether it closes on this line. In single quotes
// a doubled single quote is one quote; in double quotes a backslash escapes.
func skipQuoted(text string, i int, quote byte) (int, bool) {
	for ; i < len(text); i++ {
		switch {
		case quote == '"' && text[i] == '\\':
			i++
		case text[i] == quote && quote == '\'' && i+1 < len(text) && text[i+1] == '\'':
			i++
		case text[i] == quote:
			return i + 1, true
		}
	}
	return len(text), false
}

// isFlowIndicator reports whether c ends a plain scalar in flow context.
func isFlowIndicator(c byte) bool {
	return c == ',' || c == '[' || c == ']' || c == '{' || c == '}'
}

// flow reads a line in flow context from i.
func (s *flowScan) flow(n int, text string, i int) (flowReference, bool) {
	for i < len(text) {
		c := text[i]
		switch {
		case c == ' ' || c == '\t':
			i++
		case c == '#' && (i == 0 || text[i-1] == ' ' || text[i-1] == '\t'):
			return flowReference{}, false
		case c == '"' || c == '\'':
			end, closed := skipQuoted(text, i+1, c)
			if !closed {
				s.quote = c
				return flowReference{}, false
			}
			s.scalarDone(text[i:end])
			i = end
		case c == '{' || c == '[':
			s.stack = append(s.stack, flowFrame{open: c})
			i++
		case c == '}' || c == ']':
			s.stack = s.stack[:len(s.stack)-1]
			i++
			if len(s.stack) == 0 {
				return flowReference{}, false // what may follow a collection in block context holds no other
			}
		case c == ',':
			s.top().key = ""
			i++
		case c == ':':
			i++ // the value indicator, after a quoted key
		default:
			start := i
			for i < len(text) && !isFlowIndicator(text[i]) &&
				!(text[i] == ':' && (i+1 == len(text) || text[i+1] == ' ' || isFlowIndicator(text[i+1]))) &&
				!(text[i] == '#' && (text[i-1] == ' ' || text[i-1] == '\t')) {
				i++
			}
			if i < len(text) && text[i] == '{' && i > start && text[i-1] == '$' {
				return s.trapped(n, text, start, i-1), true
			}
			s.scalarDone(strings.TrimSpace(text[start:i]))
			if i < len(text) && text[i] == ':' {
				i++
			}
		}
	}
	return flowReference{}, false
}

// top is the innermost open collection.
func (s *flowScan) top() *flowFrame { return &s.stack[len(s.stack)-1] }

// scalarDone records a scalar just read: in a mapping, before its ':', the
// key of the value that follows.
func (s *flowScan) scalarDone(scalar string) {
	if f := s.top(); f.open == '{' && f.key == "" {
		f.key = scalar
	} else if f.open == '{' {
		f.key = "" // the value: the next scalar is a key again after ','
	}
}

// trapped builds the explanation of the plain scalar starting at start whose
// "${" is at dollar: the reference as written (with the "$" of a "$${"
// escape) and the scalar quoted whole, up to the end of the entry, reading
// each ${...} as the user meant it.
func (s *flowScan) trapped(n int, text string, start, dollar int) flowReference {
	first := dollar
	for first > start && text[first-1] == '$' {
		first--
	}
	ref := text[first:closeBrace(text, dollar+1)]
	end := start
	for end < len(text) {
		c := text[end]
		if c == '$' && end+1 < len(text) && text[end+1] == '{' {
			end = closeBrace(text, end+1)
			continue
		}
		if isFlowIndicator(c) || (c == '#' && (text[end-1] == ' ' || text[end-1] == '\t')) {
			break
		}
		end++
	}
	scalar := strings.TrimSpace(text[start:end])
	quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(scalar) + `"`
	top := s.top()
	fix := quoted
	if top.open == '{' && top.key != "" {
		fix = top.key + ": " + quoted
	}
	from := start
	to := start + len(scalar)
	return flowReference{line: n, ref: ref, open: top.open, fix: fix, from: from, to: to, quoted: quoted}
}

// closeBrace returns the index after the '}' matching the '{' at i, or the
// end of text if it is not closed on the line.
func closeBrace(text string, i int) int {
	depth := 0
	for j := i; j < len(text); j++ {
		switch text[j] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return j + 1
			}
		}
	}
	return len(text)
}
