package blob

import (
	"os"
	"time"
)

// SetClock replaces the store's clock, for the conformance suite's Age.
func SetClock(s *Store, now func() time.Time) { s.now = now }

// TempFiles counts the temporary files of unfinished uploads.
func TempFiles(s *Store) int {
	left, _ := os.ReadDir(s.tmpDir())
	return len(left)
}
