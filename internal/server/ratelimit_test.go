package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

var epoch = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func TestAnAddressIsRefusedAfterItsBurstUntilAFailureIsForgiven(t *testing.T) {
	l := newFailureLimiter(3, time.Second)
	for i := range 3 {
		if wait := l.retryAfter("a", epoch); wait != 0 {
			t.Fatalf("after %d failures: wait %v, want none", i, wait)
		}
		if limited := l.fail("a", epoch); limited != (i == 2) {
			t.Fatalf("failure %d: limited = %v", i+1, limited)
		}
	}
	if wait := l.retryAfter("a", epoch); wait != time.Second {
		t.Fatalf("after the burst: wait %v, want 1s", wait)
	}
	if wait := l.retryAfter("a", epoch.Add(400*time.Millisecond)); wait != 600*time.Millisecond {
		t.Fatalf("0.4s later: wait %v, want 0.6s", wait)
	}
	if wait := l.retryAfter("b", epoch); wait != 0 {
		t.Fatalf("another address waits %v, want none", wait)
	}
	if wait := l.retryAfter("a", epoch.Add(time.Second)); wait != 0 {
		t.Fatalf("a refill later: wait %v, want none", wait)
	}
	if !l.fail("a", epoch.Add(time.Second)) {
		t.Fatal("one forgiven failure spent again should limit the address again")
	}
}

func TestAddressesWhoseBucketsRefilledAreForgotten(t *testing.T) {
	l := newFailureLimiter(2, time.Second)
	for i := range minSweep - 1 {
		l.fail(fmt.Sprintf("10.0.%d.%d", i/256, i%256), epoch)
	}
	if n := l.tracked(); n != minSweep-1 {
		t.Fatalf("tracked %d, want %d", n, minSweep-1)
	}
	// Two seconds on, every old bucket is full again: the next failure sweeps them.
	l.fail("192.0.2.1", epoch.Add(2*time.Second))
	if n := l.tracked(); n != 1 {
		t.Fatalf("tracked %d after the sweep, want 1 (only the address that just failed)", n)
	}
}

// TestNoAddressGetsMoreThanItsBurstPlusItsRefills checks the limiter's
// promise for any sequence of attempts: by time T, an address has made at
// most burst + T/refill failed attempts that were let through.
func TestNoAddressGetsMoreThanItsBurstPlusItsRefills(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		burst := rapid.IntRange(1, 10).Draw(t, "burst")
		refill := time.Duration(rapid.IntRange(1, 1000).Draw(t, "refill ms")) * time.Millisecond
		l := newFailureLimiter(burst, refill)
		gaps := rapid.SliceOf(rapid.IntRange(0, 300)).Draw(t, "gaps ms")
		now, through := epoch, 0
		for _, gap := range gaps {
			now = now.Add(time.Duration(gap) * time.Millisecond)
			if l.retryAfter("a", now) > 0 {
				continue
			}
			through++
			l.fail("a", now)
			if bound := float64(burst) + float64(now.Sub(epoch))/float64(refill); float64(through) > bound+1e-9 {
				t.Fatalf("%d attempts let through by %v, bound %.2f", through, now.Sub(epoch), bound)
			}
		}
	})
}

func TestClientKeyIsTheAddressOrItsIPv6Network(t *testing.T) {
	for remote, want := range map[string]string{
		"192.0.2.7:5000":             "192.0.2.7",
		"[::ffff:192.0.2.7]:5000":    "192.0.2.7",
		"[2001:db8:1:2:aaaa::1]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:2:bbbb::9]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:3::1]:443":      "2001:db8:1:3::/64",
		"not an address":             "not an address",
		"[fe80::1%eth0]:1":           "fe80::/64",
	} {
		if got := clientKey(remote); got != want {
			t.Errorf("clientKey(%q) = %q, want %q", remote, got, want)
		}
	}
}

// callFrom makes a request from the given client address straight into the
// handler (httptest.NewServer would make every request come from 127.0.0.1).
func callFrom(h http.Handler, addr, token, method, path string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	req.RemoteAddr = addr
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestFailedAuthenticationsAreRateLimitedPerAddress(t *testing.T) {
	cfg := DefaultConfig()
	sh := newSecureHarness(t, cfg)
	// The harness lifts the limit for everyone else's tests; this one sets it.
	sh.srv.limiter = newFailureLimiter(3, time.Minute)
	h := sh.srv.Handler()
	attacker, neighbour := "192.0.2.1:4000", "198.51.100.7:4000"

	for i := range 3 {
		if rec := callFrom(h, attacker, "hatch-admin.guess", "GET", "/api/v1/hosts"); rec.Code != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d, want 401", i+1, rec.Code)
		}
	}
	// Over the limit, failed attempts get 429 instead of 401, on routes and
	// off them, whatever token they carry.
	for _, call := range []struct{ token, path string }{
		{"hatch-admin.guess", "/api/v1/hosts"}, {"", "/api/v1/no-such-route"},
	} {
		rec := callFrom(h, attacker, call.token, "GET", call.path)
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "60" ||
			!strings.Contains(rec.Body.String(), `"error":"rate_limited"`) || rec.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("over the limit, %s: %d %v %s; want 429 JSON with Retry-After 60", call.path, rec.Code, rec.Header(), rec.Body)
		}
	}
	// A valid token from the same address is never refused by the limit
	// (behind a NAT, the guesser may be a host's neighbour): it gets its
	// answer, and spends nothing.
	for range 3 {
		if rec := callFrom(h, attacker, sh.token, "GET", "/api/v1/hosts"); rec.Code != http.StatusOK {
			t.Fatalf("the right token over the limit: %d %s, want 200", rec.Code, rec.Body)
		}
	}
	if rec := callFrom(h, attacker, sh.token, "GET", "/api/v1/no-such-route"); rec.Code != http.StatusNotFound {
		t.Fatalf("the right token over the limit, unknown path: %d %s, want 404", rec.Code, rec.Body)
	}
	if rec := callFrom(h, neighbour, sh.token, "GET", "/api/v1/hosts"); rec.Code != http.StatusOK {
		t.Fatalf("another address: %d, want 200", rec.Code)
	}
	if rec := callFrom(h, neighbour, "", "GET", "/healthz"); rec.Code != http.StatusOK {
		t.Fatalf("healthz: %d, want 200 (it needs no token, so no limit)", rec.Code)
	}
	for range 10 { // successes spend nothing
		if rec := callFrom(h, neighbour, sh.token, "GET", "/api/v1/hosts"); rec.Code != http.StatusOK {
			t.Fatalf("repeated successes: %d, want 200", rec.Code)
		}
	}

	// A minute later one failure is forgiven: the next guess is answered
	// (401) and empties the bucket again.
	sh.clock.Set(sh.clock.Now().Add(time.Minute))
	if rec := callFrom(h, attacker, "hatch-admin.guess", "GET", "/api/v1/hosts"); rec.Code != http.StatusUnauthorized {
		t.Fatalf("a minute later: %d, want 401 (one failure forgiven)", rec.Code)
	}
	if rec := callFrom(h, attacker, "hatch-admin.guess", "GET", "/api/v1/hosts"); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("the forgiven failure spent: %d, want 429", rec.Code)
	}

	metrics := callFrom(h, neighbour, sh.token, "GET", "/metrics").Body.String()
	for _, want := range []string{"hatch_auth_failures_total 4\n", "hatch_auth_rate_limited_total 3\n"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if !strings.Contains(sh.logs.String(), "192.0.2.1") || strings.Count(sh.logs.String(), "over the limit") != 2 {
		t.Errorf("want one log line naming the limited address per emptied bucket; log:\n%s", sh.logs)
	}
}
