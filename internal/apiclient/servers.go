package apiclient

import (
	"slices"
	"strings"
	"time"
)

// How long a server that failed is passed over: downMin after its first
// failure in a row, doubling with each further one up to downMax. A server
// passed over is still tried when every other one is passed over too, so a
// back-off never stops a client that has somewhere left to go.
const (
	downMin = time.Second
	downMax = 30 * time.Second
)

// ParseServers reads a list of server URLs: comma-separated, each flag or
// setting possibly holding several. Blanks are dropped and repeats kept once,
// in first-seen order.
func ParseServers(values ...string) []string {
	var out []string
	for _, v := range values {
		for _, s := range strings.Split(v, ",") {
			s = strings.TrimRight(strings.TrimSpace(s), "/")
			if s != "" && !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}

// JoinServers writes a list of server URLs as ParseServers reads it.
func JoinServers(urls []string) string { return strings.Join(urls, ",") }

// downFor is how long a server is passed over after failures failures in a
// row (at least one).
func downFor(failures int) time.Duration {
	d := downMin
	for i := 1; i < failures && d < downMax; i++ {
		d *= 2
	}
	return min(d, downMax)
}

// rotation is the failover order of a client's servers. It is pure: the
// clock is an argument. The server that answered last is the active one and
// stays so (a long-poll resumes where the last one was answered); a server
// that fails is passed over for downFor its failures in a row, and the
// active one moves to the next in the list that is not passed over.
type rotation struct {
	urls   []string
	active int
	down   map[string]downMark // by URL; absent: not failing
}

type downMark struct {
	until    time.Time
	failures int
}

func newRotation(urls []string) *rotation {
	return &rotation{urls: slices.Clone(urls), down: map[string]downMark{}}
}

// order is the order to try the servers in at now: the active one and those
// after it in the list (wrapping round) that are not passed over, then the
// passed-over ones, soonest back first.
func (r *rotation) order(now time.Time) []int {
	var up, passed []int
	for k := range r.urls {
		i := (r.active + k) % len(r.urls)
		if m, ok := r.down[r.urls[i]]; ok && now.Before(m.until) {
			passed = append(passed, i)
		} else {
			up = append(up, i)
		}
	}
	slices.SortStableFunc(passed, func(a, b int) int {
		return r.down[r.urls[a]].until.Compare(r.down[r.urls[b]].until)
	})
	return append(up, passed...)
}

// failed records that server i did not answer at now: it is passed over for
// a while, and if it was the active one the next in order becomes active.
func (r *rotation) failed(i int, now time.Time) {
	u := r.urls[i]
	m := r.down[u]
	m.failures++
	m.until = now.Add(downFor(m.failures))
	r.down[u] = m
	if i == r.active {
		r.active = r.order(now)[0]
	}
}

// answered records that server i answered: it is active, and forgiven.
func (r *rotation) answered(i int) {
	r.active = i
	delete(r.down, r.urls[i])
}

// set replaces the list. The active server stays active if it is still
// listed, and every listed server keeps its back-off.
func (r *rotation) set(urls []string) {
	active := r.urls[r.active]
	r.urls = slices.Clone(urls)
	r.active = max(slices.Index(r.urls, active), 0)
	for u := range r.down {
		if !slices.Contains(r.urls, u) {
			delete(r.down, u)
		}
	}
}
