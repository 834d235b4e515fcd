package spec

import (
	"strings"
	"testing"
)

// Aliases may be any name Docker resolves on a network, so that the Compose
// loader can keep a service's original name (my_db, Auth.Service) as one.
func TestAliases(t *testing.T) {
	for _, tc := range []struct {
		alias string
		ok    bool
	}{
		{"shop-web", true},
		{"my_db", true},
		{"Auth.Service", true},
		{"_private", true},
		{strings.Repeat("a", 63), true},
		{strings.Repeat("a", 64), false},
		{"-web", false},
		{".web", false},
		{"a b", false},
		{"a/b", false},
	} {
		t.Run(tc.alias, func(t *testing.T) {
			src := "project: p\neggs:\n  web:\n    image: nginx\n    aliases: [\"" + tc.alias + "\"]\n"
			p, err := Parse([]byte(src), "hatch.yaml", Options{})
			if tc.ok && (err != nil || p.Eggs[0].Aliases[0] != tc.alias) {
				t.Fatalf("alias %q refused: %v", tc.alias, err)
			}
			if !tc.ok && (err == nil || !strings.Contains(err.Error(), "hatch.yaml:5: egg \"web\" aliases: ")) {
				t.Fatalf("alias %q accepted, or refused without its line: %v", tc.alias, err)
			}
		})
	}
}
