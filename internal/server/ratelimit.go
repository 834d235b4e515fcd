package server

import (
	"math"
	"net"
	"net/netip"
	"sync"
	"time"
)

// failureLimiter limits failed authentications per client address with one
// token bucket each: an address may fail Burst times in a row, and one failure
// is forgiven every Refill. Once its bucket is empty, an address's failed
// attempts are answered 429 instead of 401 and no longer counted, until one
// failure is forgiven. Successful requests never touch the buckets and are
// never refused by it (Server.authenticate looks at the token first).
//
// It is a few lines of arithmetic on explicit times rather than a library
// limiter, so that tests drive it with their own clock and no module is added
// for it.
type failureLimiter struct {
	burst  float64
	refill time.Duration

	mu      sync.Mutex        // guards buckets, sweepAt
	buckets map[string]bucket // by clientKey; an absent key has a full bucket
	sweepAt int               // sweep full buckets once there are this many
}

// bucket is how many failures an address may still make as of at.
type bucket struct {
	left float64
	at   time.Time
}

// minSweep is the number of tracked addresses below which no sweep runs.
const minSweep = 1024

func newFailureLimiter(burst int, refill time.Duration) *failureLimiter {
	return &failureLimiter{burst: float64(burst), refill: refill, buckets: map[string]bucket{}, sweepAt: minSweep}
}

// level returns what the bucket holds at now: what it held, plus one failure
// forgiven per refill since, up to the burst.
func (l *failureLimiter) level(b bucket, now time.Time) float64 {
	elapsed := now.Sub(b.at)
	if elapsed <= 0 {
		return b.left
	}
	return math.Min(l.burst, b.left+float64(elapsed)/float64(l.refill))
}

// retryAfter returns how long the address must wait before it may try again;
// 0 means it may try now.
func (l *failureLimiter) retryAfter(key string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[key]
	if !ok {
		return 0
	}
	left := l.level(b, now)
	if left >= 1 {
		return 0
	}
	return time.Duration(math.Ceil((1 - left) * float64(l.refill)))
}

// fail records a failed authentication of the address. It reports whether
// that emptied the bucket: the address is refused from now on.
func (l *failureLimiter) fail(key string, now time.Time) (limited bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	left := l.burst
	if b, ok := l.buckets[key]; ok {
		left = l.level(b, now)
	}
	left = math.Max(0, left-1)
	l.buckets[key] = bucket{left: left, at: now}
	if len(l.buckets) >= l.sweepAt {
		l.sweep(now)
	}
	return left < 1
}

// sweep forgets the addresses whose buckets have filled up again (they are
// as good as absent), and sets the next sweep at twice what is left, so that
// sweeping costs O(1) per failure on average however many addresses fail.
func (l *failureLimiter) sweep(now time.Time) {
	for key, b := range l.buckets {
		if l.level(b, now) >= l.burst {
			delete(l.buckets, key)
		}
	}
	l.sweepAt = max(minSweep, 2*len(l.buckets))
}

// tracked returns how many addresses have a bucket (for tests).
func (l *failureLimiter) tracked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// clientKey is the address a request's failures are counted against: the
// peer's IP address, or its /64 network for IPv6, where one machine commonly
// holds a whole /64. Proxy headers are not trusted: anyone can write them.
func clientKey(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	addr = addr.Unmap()
	if addr.Is4() {
		return addr.String()
	}
	prefix, err := addr.Prefix(64)
	if err != nil {
		return addr.String()
	}
	return prefix.String()
}
