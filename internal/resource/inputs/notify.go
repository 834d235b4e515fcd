package inputs

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// NotifyTarget is one webhook that events are posted to: an entry of a
// project's `notify:` (hatch.yaml, or Compose's top-level x-hatch), which
// gets that project's events, or of the server's --notify, which gets the
// whole cluster's. Format is NotifyJSON (also "") or NotifySlack.
type NotifyTarget struct {
	URL    string `json:"url"`
	Format string `json:"format,omitempty"`
}

// The bodies a notification can have: Hatchery's own JSON, or the
// {"text": ...} of a Slack-compatible incoming webhook.
const (
	NotifyJSON  = "json"
	NotifySlack = "slack"
)

// CheckNotifyTarget refuses a target that cannot be delivered to safely:
// its URL must be absolute https (http only to a loopback address, for tests
// and a receiver on the server's own machine, since the body is signed but
// not encrypted), and its format one of the known ones. Its errors show the
// URL without its path, query, fragment or user info (see RedactURL): a webhook's
// URL often carries its token there.
func CheckNotifyTarget(t NotifyTarget) error {
	u, err := url.Parse(t.URL)
	if err != nil {
		return fmt.Errorf("url %s: not a URL", RedactURL(t.URL))
	}
	if u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("url %s: no host (write https://host/path)", RedactURL(t.URL))
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !isLoopback(u.Hostname()) {
			return fmt.Errorf("url %s: http only to a loopback address; use https (the body would cross the network unencrypted)", RedactURL(t.URL))
		}
	default:
		return fmt.Errorf("url %s: the scheme must be https (http only to a loopback address)", RedactURL(t.URL))
	}
	switch t.Format {
	case "", NotifyJSON, NotifySlack:
	default:
		return fmt.Errorf("format %q: must be json or slack", t.Format)
	}
	return nil
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// RedactURL is what logs, events and errors show of a webhook's URL: its
// scheme and host, never its user info, path, query or fragment, where
// services put the token that lets anyone post to it (a Slack webhook's is
// its path); "/…" stands for what is left out. Text that does not parse as a
// URL shows as "(not a URL)", since it may be anything.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(not a URL)"
	}
	s := (&url.URL{Scheme: u.Scheme, Host: u.Host}).String()
	if u.Path != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.User != nil {
		s += "/…"
	}
	return s
}
