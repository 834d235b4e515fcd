package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/testutil/listentest"
)

// freeAddr is a loopback address nothing listens on (listentest.FreeAddr), for
// the servers and agents these tests start.
func freeAddr(t *testing.T) string { return listentest.FreeAddr(t) }

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestVersion(t *testing.T) {
	code, out, _ := run(t, "version")
	if code != 0 || !strings.HasPrefix(out, "hatch ") {
		t.Fatalf("hatch version = %d %q", code, out)
	}
}

func TestUnknownCommandIsOneLine(t *testing.T) {
	code, _, errOut := run(t, "no-such-command")
	if code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	if !strings.HasPrefix(errOut, "hatch: ") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("stderr = %q, want one hatch: line", errOut)
	}
}
