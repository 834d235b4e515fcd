package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
)

func TestPrintCertificatesShowsExpiryAndTheLastErrorSafely(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	err := printCertificates(&b, []api.Certificate{
		{Host: "shop.example.com", Source: "acme", Issuer: "Pebble", NotAfter: now.Add(48 * time.Hour), LastError: "CA down\x1b[2J"},
		{Host: "new.example.com", Source: "acme"},
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"shop.example.com", "Pebble", "2026-01-03T00:00:00Z (in 48h0m0s)", `CA down\x1b[2J`, "new.example.com", "none yet"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Error("an escape sequence was printed as is")
	}
	b.Reset()
	if err := printCertificates(&b, nil, now); err != nil || b.Len() != 0 {
		t.Errorf("no certificates printed %q", b.String())
	}
}
