package ingress

import (
	"sort"
	"strings"
	"time"
)

// routeTable maps a request's host and path to an egg. It is immutable once
// built, so requests read it without a lock while Update swaps in a new one.
type routeTable struct {
	// hosts holds, per lowercase hostname, the routes for it, longest prefix
	// first so that the first match is the most specific one.
	hosts map[string][]routeEntry
}

type routeEntry struct {
	prefix  string
	egg     *egg
	timeout time.Duration // the route's upstream timeout; zero: the default
}

// newRouteTable builds the table for normalized, validated routes.
func newRouteTable(routes map[Route]*egg) *routeTable {
	t := &routeTable{hosts: make(map[string][]routeEntry)}
	for r, e := range routes {
		t.hosts[r.Host] = append(t.hosts[r.Host], routeEntry{prefix: r.PathPrefix, egg: e, timeout: r.UpstreamTimeout})
	}
	for _, entries := range t.hosts {
		sort.Slice(entries, func(i, j int) bool { return len(entries[i].prefix) > len(entries[j].prefix) })
	}
	return t
}

// match returns the egg serving host (as a Host header gives it, port and
// all) and path, or nil, with the route's upstream timeout (zero: the
// default).
func (t *routeTable) match(host, path string) (*egg, time.Duration) {
	entries := t.hosts[canonicalHost(host)]
	for _, r := range entries {
		if pathHasPrefix(path, r.prefix) {
			return r.egg, r.timeout
		}
	}
	return nil, 0
}

// canonicalHost strips the port and a trailing dot and lowercases, so that
// "Shop.localhost.:8080" finds the route for "shop.localhost". It does not
// allocate for a host that is already lowercase.
func canonicalHost(host string) string {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && i > strings.LastIndexByte(host, ']') {
		host = host[:i]
	}
	host = strings.TrimSuffix(host, ".")
	return strings.ToLower(host)
}

// pathHasPrefix reports whether prefix (empty, or "/..." without a trailing
// slash) covers path on a segment boundary.
func pathHasPrefix(path, prefix string) bool {
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	return len(path) == len(prefix) || prefix == "" || path[len(prefix)] == '/'
}
