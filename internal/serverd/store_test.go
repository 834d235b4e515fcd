package serverd

import (
	"strings"
	"testing"
)

func TestResolveStore(t *testing.T) {
	tests := []struct {
		flag, env, sqlite, postgres, err string
	}{
		{flag: "", sqlite: "data/hatch.db"},
		{flag: "sqlite:/var/lib/hatch/db.sqlite", sqlite: "/var/lib/hatch/db.sqlite"},
		{flag: "sqlite:", err: "want sqlite:<path> or postgres://"},
		{flag: "postgres://u@db/hatch", postgres: "postgres://u@db/hatch"},
		{flag: "postgres://u:secret@db/hatch", err: "holds a password"},
		{flag: "postgres://u@db/hatch?password=secret", err: "holds a password"},
		{flag: "postgres://u:secret@db:%zz/hatch", err: "not valid"},
		{env: "postgres://u:secret@db/hatch", postgres: "postgres://u:secret@db/hatch"},
		{env: "sqlite:/x.db", sqlite: "/x.db"},
		{env: "mysql://u:secret@x", err: "HATCH_STORE: want"},
		{flag: "sqlite:/a.db", env: "postgres://u:secret@db/hatch", sqlite: "/a.db"},
		{flag: "mysql://x", err: "want sqlite:<path> or postgres://"},
		// A scheme is matched whatever its case, so an upper-case URL is
		// read as one (and its password refused) instead of being echoed
		// whole as an unknown store.
		{flag: "POSTGRESQL://alice:secret@db/hatch", err: "holds a password"},
		{flag: "PostgreSQL://alice@db/hatch", postgres: "postgresql://alice@db/hatch"},
		{env: "POSTGRES://alice:secret@db/hatch", postgres: "postgres://alice:secret@db/hatch"},
		{flag: "SQLite:/x.db", sqlite: "/x.db"},
		// A key=value connection string is not a form --store reads, and the
		// error says so without repeating it.
		{flag: "host=db user=alice password=secret dbname=hatch", err: "key=value"},
		{flag: "secret", err: "want sqlite:<path> or postgres://"},
	}
	for _, tt := range tests {
		got, err := ResolveStore(tt.flag, tt.env, "data")
		if got.SQLitePath != tt.sqlite || got.PostgresURL != tt.postgres || (err == nil) != (tt.err == "") ||
			err != nil && !strings.Contains(err.Error(), tt.err) {
			t.Errorf("ResolveStore(%q, %q) = %+v, %v; want sqlite %q postgres %q, error containing %q",
				tt.flag, tt.env, got, err, tt.sqlite, tt.postgres, tt.err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("the error repeats the store URL's password: %v", err)
		}
	}
}
