package inputs

import (
	"strings"
	"testing"
)

func TestCheckNotifyTarget(t *testing.T) {
	for _, tc := range []struct {
		target NotifyTarget
		want   string // "" for accepted
	}{
		{NotifyTarget{URL: "https://hooks.example.com/x?token=t"}, ""},
		{NotifyTarget{URL: "https://hooks.slack.com/services/T/B/X", Format: NotifySlack}, ""},
		{NotifyTarget{URL: "http://127.0.0.1:9000/hook", Format: NotifyJSON}, ""},
		{NotifyTarget{URL: "http://[::1]:9000/hook"}, ""},
		{NotifyTarget{URL: "http://localhost/hook"}, ""},
		{NotifyTarget{URL: "http://hooks.example.com/x?token=s3cret"}, "http only to a loopback address"},
		{NotifyTarget{URL: "http://127.0.0.1.example.com/s3cret"}, "http only to a loopback address"},
		{NotifyTarget{URL: "ftp://hooks.example.com/s3cret"}, "the scheme must be https"},
		{NotifyTarget{URL: "/relative/s3cret"}, "no host"},
		{NotifyTarget{URL: "https://hooks.example.com/x", Format: "teams"}, `format "teams"`},
		{NotifyTarget{URL: "https://%zz/s3cret"}, "not a URL"},
	} {
		err := CheckNotifyTarget(tc.target)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v refused: %v", tc.target, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want %q", tc.target, err, tc.want)
		case err != nil && strings.Contains(err.Error(), "s3cret"):
			t.Errorf("%+v: the error shows the URL's path or query: %v", tc.target, err)
		}
	}
}

func TestRedactURLKeepsTheSchemeAndHostOnly(t *testing.T) {
	for raw, want := range map[string]string{
		"https://hooks.slack.com/services/T/B/s3cret":   "https://hooks.slack.com/…",
		"https://user:s3cret@hooks.example.com":         "https://hooks.example.com/…",
		"https://hooks.example.com:8443/x?token=s3cret": "https://hooks.example.com:8443/…",
		"https://hooks.example.com":                     "https://hooks.example.com",
		"not a url with s3cret":                         "(not a URL)",
	} {
		if got := RedactURL(raw); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", raw, got, want)
		}
	}
}
