package spec

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/resource/inputs"
)

func TestNotifyTargetsAreReadWithTheirFormatAndEnvironment(t *testing.T) {
	env := func(name string) (string, bool) {
		if name == "SLACK_WEBHOOK" {
			return "https://hooks.slack.com/services/T0/B0/token", true
		}
		return "", false
	}
	src := `project: shop
eggs:
  web: {image: nginx}
notify:
  - https://hooks.example.com/hatch?token=abc
  - {url: "${env.SLACK_WEBHOOK}", format: slack}
  - {url: "http://127.0.0.1:9000/hook", format: json}
`
	p, err := Parse([]byte(src), "hatch.yaml", Options{LookupEnv: env})
	if err != nil {
		t.Fatal(err)
	}
	want := []inputs.NotifyTarget{
		{URL: "https://hooks.example.com/hatch?token=abc"},
		{URL: "https://hooks.slack.com/services/T0/B0/token", Format: inputs.NotifySlack},
		{URL: "http://127.0.0.1:9000/hook"}, // json is the default, held as ""
	}
	if !slices.Equal(p.Notify, want) {
		t.Fatalf("Notify = %+v, want %+v", p.Notify, want)
	}
	// Written back, it reads the same.
	out, err := Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse(out, "hatch.yaml", Options{})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !slices.Equal(again.Notify, want) {
		t.Fatalf("written and read again: %+v, want %+v\n%s", again.Notify, want, out)
	}
}

func TestNotifyTargetsAreCheckedAtTheirLineWithoutTheirSecretParts(t *testing.T) {
	src := `project: shop
eggs:
  web: {image: nginx}
notify:
  - http://hooks.example.com/hatch?token=s3cret
  - {url: "https://hooks.example.com/x", format: teams}
  - {format: slack}
  - ftp://files.example.com/drop/s3cret
  - https://ok.example.com/hook
`
	p, err := parse(src)
	if err == nil {
		t.Fatalf("loaded %+v, want errors", p.Notify)
	}
	checkDiagnostics(t, src, diagnostics(t, err), []want{
		{"token=s3cret", []string{"notify[0] url http://hooks.example.com/…: http only to a loopback address"}},
		{"teams", []string{`notify[1] format "teams": must be json or slack`}},
		{"{format: slack}", []string{"notify[2] needs url:"}},
		{"ftp://", []string{"notify[3] url ftp://files.example.com/…: the scheme must be https"}},
	})
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("an error shows a URL's path or query: %v", err)
	}
}

func TestNotifyMustBeAList(t *testing.T) {
	src := `project: shop
eggs:
  web: {image: nginx}
notify: https://hooks.example.com/hatch
`
	_, err := parse(src)
	checkDiagnostics(t, src, diagnostics(t, err), []want{{"notify:", []string{"notify must be a list"}}})
}

// diagnostics are the problems of Parse's error.
func diagnostics(t *testing.T, err error) []Diagnostic {
	t.Helper()
	var perr *Error
	if !errors.As(err, &perr) {
		t.Fatalf("Parse = %v; want an *Error", err)
	}
	return perr.Errors
}
