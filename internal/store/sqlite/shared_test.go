package sqlite

import (
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/store/sqlstore"
)

// The dialect's Now is the clock in the stored form (milliseconds), not
// seconds or a Julian day: the shared store compares it with stored times.
func TestDialectNowIsTheClockInMillis(t *testing.T) {
	s := openTemp(t)
	var ms int64
	if err := s.db.QueryRowContext(t.Context(), `SELECT `+dialect.Now).Scan(&ms); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(sqlstore.FromMillis(ms)); d < -time.Second || d > time.Second {
		t.Fatalf("dialect.Now = %d (%v), %v from the clock", ms, sqlstore.FromMillis(ms), d)
	}
}
