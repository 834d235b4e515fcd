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
	tls     bool          // plain HTTP is redirected to HTTPS
	hsts    bool          // HTTPS answers carry Strict-Transport-Security
}

// newRouteTable builds the table for normalized, validated routes.
func newRouteTable(routes map[Route]*egg) *routeTable {
	t := &routeTable{hosts: make(map[string][]routeEntry)}
	for r, e := range routes {
		t.hosts[r.Host] = append(t.hosts[r.Host], routeEntry{prefix: r.PathPrefix, egg: e, timeout: r.UpstreamTimeout, tls: r.TLS, hsts: r.HSTS})
	}
	for _, entries := range t.hosts {
		sort.Slice(entries, func(i, j int) bool { return len(entries[i].prefix) > len(entries[j].prefix) })
	}
	return t
}

// match returns the route serving host (as a Host header gives it, port and
// all) and path, or nil. A nil table (no Update yet) serves nothing.
func (t *routeTable) match(host, path string) *routeEntry {
	if t == nil {
		return nil
	}
	entries := t.hosts[canonicalHost(host)]
	for i := range entries {
		if pathHasPrefix(path, entries[i].prefix) {
			return &entries[i]
		}
	}
	return nil
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
