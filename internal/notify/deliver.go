package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/store"
)

// The headers of a delivery. The signature covers the timestamp and the
// body ("<timestamp>.<body>"), so a receiver that refuses an old timestamp
// refuses a replayed delivery too (as Stripe's Stripe-Signature does);
// its form is GitHub's X-Hub-Signature-256 ("sha256=<hex>").
const (
	HeaderSignature = "Hatch-Signature"
	HeaderTimestamp = "Hatch-Timestamp" // Unix seconds
	HeaderEvent     = "Hatch-Event"     // the event's type
	HeaderDelivery  = "Hatch-Delivery"  // the event's seq: a receiver's key to drop a repeat
)

// Sign returns the Hatch-Signature of body sent at timestamp ts (Unix
// seconds) with key.
func Sign(key []byte, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(strconv.FormatInt(ts, 10) + "."))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Verify checks a delivery as a receiver should: the signature of the
// timestamp and body with key, compared in constant time, and a timestamp
// within tolerance of now. It is the receiver's half of Sign, for Go
// receivers and the tests.
func Verify(key []byte, timestamp, signature string, body []byte, now time.Time, tolerance time.Duration) error {
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("%s %q: not Unix seconds", HeaderTimestamp, timestamp)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%s: %v from now, more than %v (a replay, or a clock off)", HeaderTimestamp, d.Round(time.Second), tolerance)
	}
	if !hmac.Equal([]byte(signature), []byte(Sign(key, ts, body))) {
		return fmt.Errorf("%s: does not match the body and timestamp with this key", HeaderSignature)
	}
	return nil
}

// ProjectKey is the key a project's own webhooks are signed with, derived
// from the server's secret and the project ("<namespace>/<name>") as hex
// text: the people given one project's key can neither verify nor forge
// another project's or the cluster's deliveries, and no key is stored per
// project. `hatch server notify-key --project` prints it.
func ProjectKey(secret []byte, project string) []byte {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("hatch notify project " + project))
	return []byte(hex.EncodeToString(mac.Sum(nil)))
}

// Body is what a target of format is posted for e: the event as the API
// shows it (api.Event), or for a Slack-compatible webhook {"text": ...}.
func Body(format string, e store.Event) ([]byte, error) {
	if format == inputs.NotifySlack {
		return json.Marshal(struct {
			Text string `json:"text"`
		}{slackText(e)})
	}
	return json.Marshal(api.Event{Seq: e.Seq, Time: e.Time, Type: string(e.Type), Project: e.Project, Host: e.Host,
		Resource: e.Resource, Message: e.Message, Actor: e.Actor})
}

// slackText is one line for a chat: the type in bold, then what it
// concerns and its message, with Slack's three control characters escaped
// (a message may quote a container's output).
func slackText(e store.Event) string {
	parts := []string{"*" + string(e.Type) + "*"}
	for _, p := range []string{e.Project, e.Resource} {
		if p != "" {
			parts = append(parts, slackEscape(p))
		}
	}
	if e.Host != "" {
		parts = append(parts, "host "+slackEscape(e.Host))
	}
	text := strings.Join(parts, " ")
	if e.Message != "" {
		text += ": " + slackEscape(e.Message)
	}
	return text
}

var slackEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

func slackEscape(s string) string { return slackEscaper.Replace(s) }

// hostOf is all that is said of a receiver: its host (and port).
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(not a URL)"
	}
	return u.Host
}

// deliver posts d, retrying with exponential back-off up to Tries times; a
// 4xx answer but 408 and 429 is not retried (the receiver refuses it). It
// returns the tries made and the last error.
func (s *Service) deliver(ctx context.Context, d delivery) (int, error) {
	body, err := Body(d.target.Format, d.event)
	if err != nil {
		return 0, fmt.Errorf("encode: %w", err)
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.Multiplier, b.RandomizationFactor = s.cfg.FirstRetry, s.cfg.MaxRetry, 2, 0.1
	b.MaxElapsedTime = 0 // bounded by the tries
	tries := 0
	err = backoff.Retry(func() error {
		tries++
		return s.post(ctx, d, body)
	}, backoff.WithContext(backoff.WithMaxRetries(b, uint64(s.cfg.Tries-1)), ctx))
	if err == nil {
		s.log.Debug("notification delivered", zap.String("receiver", hostOf(d.target.URL)), zap.Int64("seq", d.event.Seq), zap.Int("tries", tries))
	}
	return tries, err
}

// post makes one attempt. Its error never holds the URL: Go's client puts
// the whole of it, query and all, into its *url.Error.
func (s *Service) post(ctx context.Context, d delivery, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.target.URL, bytes.NewReader(body))
	if err != nil {
		return backoff.Permanent(errors.New("the URL does not make a request"))
	}
	ts := s.deps.Now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "hatch-notify")
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderSignature, Sign(d.key, ts, body))
	req.Header.Set(HeaderEvent, string(d.event.Type))
	req.Header.Set(HeaderDelivery, strconv.FormatInt(d.event.Seq, 10))
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests:
		return backoff.Permanent(fmt.Errorf("answered %d %s", resp.StatusCode, http.StatusText(resp.StatusCode)))
	default:
		return fmt.Errorf("answered %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
}
