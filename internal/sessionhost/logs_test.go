package sessionhost

import (
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
)

func TestLineWriterCutsDockersTimestampedOutputIntoRecords(t *testing.T) {
	var got []contract.LogRecord
	w := &lineWriter{emit: func(r contract.LogRecord) { got = append(got, r) }, base: contract.LogRecord{Egg: "web", Slot: 2}, stream: "stderr"}
	// Writes split anywhere: a record is made per whole line only.
	for _, part := range []string{"2024-05-01T10:00:00.123456789Z fir", "st\n2024-05-01T10:00:01Z second\n", "no timestamp"} {
		if _, err := w.Write([]byte(part)); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 2 {
		t.Fatalf("%d records before the flush, want 2: %+v", len(got), got)
	}
	w.flush()
	want := []string{"first", "second", "no timestamp"}
	for i, r := range got {
		if r.Line != want[i] || r.Egg != "web" || r.Slot != 2 || r.Stream != "stderr" {
			t.Fatalf("record %d = %+v, want %q of web/2 on stderr", i, r, want[i])
		}
	}
	if at := time.Date(2024, 5, 1, 10, 0, 0, 123456789, time.UTC); !got[0].Time.Equal(at) {
		t.Fatalf("time %v, want Docker's %v", got[0].Time, at)
	}
}

func TestLineWriterCutsALineTooLongAndKeepsUTF8Valid(t *testing.T) {
	var got []contract.LogRecord
	w := &lineWriter{emit: func(r contract.LogRecord) { got = append(got, r) }, stream: "stdout"}
	long := strings.Repeat("é", maxLine) // 2 bytes each: twice the limit
	if _, err := w.Write([]byte("2024-05-01T10:00:00Z " + long + "\n")); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].Line) > maxLine+3 || !strings.HasPrefix(got[0].Line, "éé") {
		t.Fatalf("got %d records, the first %d bytes long", len(got), len(got[0].Line))
	}
	if !strings.ContainsRune(got[0].Line, 'é') || strings.Contains(got[0].Line, "\xc3\n") {
		t.Fatal("the cut line is not valid text")
	}
}
