package spec

import (
	"errors"
	"strings"
	"testing"
)

func TestParseExplainsAReferenceUnquotedInAFlowCollection(t *testing.T) {
	const head = "project: shop\neggs:\n  web:\n    image: web:1\n    port: 8080\n"
	tests := []struct {
		name string
		src  string
		at   string // the line the error must be on
		want string // the whole message
	}{
		{
			name: "the README's route with its own certificate, on one line",
			src:  head + "    routes:\n      - {host: shop.example.com, tls: {cert: ${secret.crt}, key: ${secret.key}}}\n",
			at:   "{host: shop.example.com",
			want: `not valid YAML: ${secret.crt} inside {...} must be quoted: cert: "${secret.crt}"`,
		},
		{
			name: "a reference inside [...]",
			src:  head + "    command: [/app, --db, ${db.address}]\n  db:\n    image: db:1\n    port: 5432\n",
			at:   "command:",
			want: `not valid YAML: ${db.address} inside [...] must be quoted: "${db.address}"`,
		},
		{
			name: "the whole scalar is quoted, not only the reference",
			src:  head + "    env: {DATABASE_URL: postgres://app@${db.address}/shop, REGION: eu}\n",
			at:   "env:",
			want: `not valid YAML: ${db.address} inside {...} must be quoted: DATABASE_URL: "postgres://app@${db.address}/shop"`,
		},
		{
			name: "a collection over several lines: the error is on the reference's line",
			src:  head + "    env: {\n      A: plain,\n      B: ${env.REGION:-eu}\n    }\n",
			at:   "B: ",
			want: `not valid YAML: ${env.REGION:-eu} inside {...} must be quoted: B: "${env.REGION:-eu}"`,
		},
		{
			name: "a literal $${ is quoted too",
			src:  head + "    command: [echo, $${not.a.reference}]\n",
			at:   "command:",
			want: `not valid YAML: $${not.a.reference} inside [...] must be quoted: "$${not.a.reference}"`,
		},
		{
			name: "quoted strings, comments and block scalars before it are not collections",
			src: head + "    labels: {note: \"a { in quotes\", other: 'it''s ['}  # a { in a comment\n" +
				"    entrypoint: [\"/bin/sh\", \"-c\"]\n" +
				"    user: |\n      {not: [flow\n    env: {A: ${x.address}}\n",
			at:   "env:",
			want: `not valid YAML: ${x.address} inside {...} must be quoted: A: "${x.address}"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse(tt.src)
			var perr *Error
			if !errors.As(err, &perr) || len(perr.Errors) != 1 {
				t.Fatalf("Parse = %v, want one error", err)
			}
			d := perr.Errors[0]
			if line := lineOf(t, tt.src, tt.at); d.Line != line || d.Message != tt.want {
				t.Errorf("got  %s\nwant hatch.yaml:%d: %s", d, line, tt.want)
			}
		})
	}
}

func TestParseKeepsTheParsersMessageForOtherErrors(t *testing.T) {
	// The hint is only for the error a reference causes: an unclosed
	// collection before it keeps the parser's own words and line, and a
	// reference in block style or in quotes is not a problem at all.
	src := "project: shop\neggs:\n  web:\n    image: [web\n    env:\n      A: ${env.REGION:-eu}\n      B: \"${env.REGION:-eu}\"\n    labels: {b: \"${x}\"}\n"
	_, err := parse(src)
	var perr *Error
	if !errors.As(err, &perr) || len(perr.Errors) != 1 {
		t.Fatalf("Parse = %v, want one error", err)
	}
	if d := perr.Errors[0]; d.Line != 4 || !strings.Contains(d.Message, "did not find expected ',' or ']'") || strings.Contains(d.Message, "quoted") {
		t.Errorf("got %s, want the parser's own error at line 4", d)
	}
	ok := "project: shop\neggs:\n  web:\n    image: web\n    env:\n      A: ${env.REGION:-eu}\n    labels: {b: \"${env.REGION:-eu}\", c: '${env.REGION:-eu}'}\n"
	if _, err := parse(ok); err != nil {
		t.Errorf("block style and quoted references: %v", err)
	}
}

func TestExplainFlowReference(t *testing.T) {
	tests := []struct {
		name string
		data string
		line int // 0: not explained
		want string
	}{
		{"a file that parses has nothing to explain", "a: {b: \"${x}\"}\nc: ${y}\n", 0, ""},
		{"the reference's line, not the collection's", "a:\n  b: {\n    c: ${x}\n  }\nd: 1\n", 3, `${x} inside {...} must be quoted: c: "${x}"`},
		{"several on a line: the first", "a: {b: ${x}, c: ${y}}\n", 1, `${x} inside {...} must be quoted: b: "${x}"`},
		{"CRLF line ends", "a: 1\r\nb: [${x}]\r\n", 2, `${x} inside [...] must be quoted: "${x}"`},
		{"an error before the reference is its own", "a: [1\nb: {c: ${x}}\n", 0, ""},
		{"a quote in the scalar is escaped", "a: [say \"${x}\"]\n", 1, `${x} inside [...] must be quoted: "say \"${x}\""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line, msg, ok := ExplainFlowReference([]byte(tt.data))
			if ok != (tt.line != 0) || line != tt.line || msg != tt.want {
				t.Errorf("got %v %d %q, want line %d %q", ok, line, msg, tt.line, tt.want)
			}
		})
	}
}

func TestExplainFlowReferenceOnEveryPrefix(t *testing.T) {
	// The scanner reads a file the parser refused, so it must hold up on
	// any text: every prefix of a file mixing the forms it tells apart.
	doc := "a: {b: \"x\\\" {\", c: 'it''s [', d: [e, {f: g}]}  # {\n" +
		"h: |\n  {[\n- ? [x]\n  : y\n\"k\": {l: $$, m: a:b#c, n: ${o.p}/${q}}\n  r: [\n  ${s}]\n"
	for i := range len(doc) + 1 {
		ExplainFlowReference([]byte(doc[:i]))
	}
}
