package sessionhost

import (
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/hatchery/hatchery/internal/containers"
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

func TestPickReadsARunsContainerOnlyWhenAskedForThatRun(t *testing.T) {
	labels := func(egg, slot, run string) map[string]string {
		l := map[string]string{containers.LabelManaged: "true", containers.LabelHost: "h1", containers.LabelEgg: egg, containers.LabelSlot: slot}
		if run != "" {
			l[containers.LabelRun] = run
		}
		return l
	}
	found := []container.Summary{
		{ID: "web0", State: container.StateRunning, Labels: labels("web", "0", "")},
		{ID: "web1", State: container.StateRunning, Labels: labels("web", "1", "")},
		{ID: "runA", State: container.StateExited, Labels: labels("web", "0", "A")},
		{ID: "runB", State: container.StateCreated, Labels: labels("web", "0", "B")},
		{ID: "relay", State: container.StateRunning, Labels: labels("web.relay-x", "0", "")},
		{ID: "other-host", State: container.StateRunning, Labels: map[string]string{containers.LabelManaged: "true", containers.LabelHost: "h2", containers.LabelEgg: "web", containers.LabelSlot: "0", containers.LabelRun: "A"}},
	}
	ids := func(rs []replica) string {
		var out []string
		for _, r := range rs {
			out = append(out, r.id)
		}
		return strings.Join(out, ",")
	}
	for _, c := range []struct {
		name string
		req  contract.LogsRequest
		want string
	}{
		{"the egg's logs leave runs and relays out", contract.LogsRequest{Egg: "web", Slot: -1}, "web0,web1"},
		{"a slot narrows the replicas", contract.LogsRequest{Egg: "web", Slot: 1}, "web1"},
		{"a run reads its container, ended or not, and this host's only", contract.LogsRequest{Egg: "web", Slot: -1, Run: "A"}, "runA"},
		{"a run only created is not read yet", contract.LogsRequest{Egg: "web", Slot: -1, Run: "B"}, ""},
		{"a run of another egg is not read", contract.LogsRequest{Egg: "api", Slot: -1, Run: "A"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := ids(pick(found, "h1", c.req)); got != c.want {
				t.Fatalf("picked %q, want %q", got, c.want)
			}
		})
	}
}
