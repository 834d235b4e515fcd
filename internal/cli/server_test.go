package cli

import (
	"strings"
	"testing"
)

func TestSqlitePath(t *testing.T) {
	tests := []struct {
		flag, want, err string
	}{
		{"", "data/hatch.db", ""},
		{"sqlite:/var/lib/hatch/db.sqlite", "/var/lib/hatch/db.sqlite", ""},
		{"sqlite:", "", "want sqlite:<path>"},
		{"postgres://u:secret@db/hatch", "", "not available yet"},
		{"mysql://x", "", "want sqlite:<path>"},
	}
	for _, tt := range tests {
		got, err := sqlitePath(tt.flag, "data")
		if got != tt.want || (err == nil) != (tt.err == "") || err != nil && !strings.Contains(err.Error(), tt.err) {
			t.Errorf("sqlitePath(%q) = %q, %v; want %q, error containing %q", tt.flag, got, err, tt.want, tt.err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("the error repeats the store URL's password: %v", err)
		}
	}
}

func TestServerRefusesABadStoreBeforeStarting(t *testing.T) {
	code, _, errOut := run(t, "server", "--data-dir", t.TempDir(), "--store", "mysql://x")
	if code != 1 || !strings.Contains(errOut, "sqlite:<path>") {
		t.Fatalf("hatch server --store mysql://x = %d %q", code, errOut)
	}
}
