package ingress

import (
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestCanonicalHost(t *testing.T) {
	for in, want := range map[string]string{
		"shop.localhost":         "shop.localhost",
		"Shop.Localhost:8080":    "shop.localhost",
		"shop.localhost.":        "shop.localhost",
		"shop.localhost.:80":     "shop.localhost",
		"[::1]:8080":             "[::1]",
		"[::1]":                  "[::1]",
		"":                       "",
		"UPPER.example.COM:9999": "upper.example.com",
	} {
		if got := canonicalHost(in); got != want {
			t.Errorf("canonicalHost(%q) = %q, want %q", in, got, want)
		}
	}
}

// segments splits a path into its non-empty segments.
func segments(p string) []string {
	var out []string
	for s := range strings.SplitSeq(p, "/") {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// TestMatchIsTheLongestCoveringPrefix checks the route table against a model
// that thinks in path segments: a route covers a path when its prefix's
// segments begin the path's segments, and the route with the most segments
// wins.
func TestMatchIsTheLongestCoveringPrefix(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		hosts := []string{"a.test", "b.test"}
		segs := rapid.SliceOfN(rapid.SampledFrom([]string{"x", "y", "xy"}), 0, 3)
		routes := make(map[Route]*egg)
		n := rapid.IntRange(0, 8).Draw(t, "routes")
		for i := range n {
			r := Route{
				Host:       rapid.SampledFrom(hosts).Draw(t, "host"),
				PathPrefix: strings.Join(append([]string{""}, segs.Draw(t, "prefix")...), "/"),
			}
			if _, dup := routes[r]; !dup {
				routes[r] = &egg{name: r.String() + "#" + string(rune('0'+i))}
			}
		}
		table := newRouteTable(routes)
		host := rapid.SampledFrom(append(hosts, "c.test")).Draw(t, "request host")
		pathSegs := segs.Draw(t, "path")
		path := "/" + strings.Join(pathSegs, "/")
		if rapid.Bool().Draw(t, "trailing slash") {
			path += "/"
		}

		var want *egg
		best := -1
		for r, e := range routes {
			p := segments(r.PathPrefix)
			if r.Host != host || len(p) > len(pathSegs) {
				continue
			}
			covers := true
			for i := range p {
				covers = covers && p[i] == pathSegs[i]
			}
			if covers && len(p) > best {
				want, best = e, len(p)
			}
		}
		var got *egg
		if r := table.match(strings.ToUpper(host)+":8080", path); r != nil {
			got = r.egg
		}
		if got != want {
			t.Fatalf("match(%s, %s) = %v, want %v", host, path, got, want)
		}
	})
}
