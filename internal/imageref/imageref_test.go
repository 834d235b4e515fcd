package imageref_test

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/imageref"
	"github.com/hatchery/hatchery/internal/testutil/listentest"
)

// A registry that takes the connection and never answers is named, with
// how long it was waited for, once the timeout passes: a plan fails in
// bounded time rather than at its request's deadline.
func TestAResolutionARegistryNeverAnswersEndsAtItsTimeoutNamingTheRegistry(t *testing.T) {
	ln := listentest.Serve(t, "tcp", "127.0.0.1:0", func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	host := ln.Addr().String()
	r := imageref.Registry{Timeout: 300 * time.Millisecond}
	began := time.Now()
	_, err := r.Resolve(t.Context(), host+"/acme/web:main", nil)
	took := time.Since(began)
	var ie *imageref.Error
	if !errors.As(err, &ie) || ie.Registry != host || !strings.Contains(err.Error(), "no answer within 300ms") {
		t.Fatalf("err %v, want an *imageref.Error naming %s and the timeout", err, host)
	}
	if took > 3*time.Second {
		t.Fatalf("the resolution took %v, want about its 300ms timeout", took)
	}
}

// A reference that names its digest is pinned already: no registry is
// asked (there is none at that address).
func TestAPinnedReferenceIsNotResolved(t *testing.T) {
	d := "sha256:" + strings.Repeat("ab", 32)
	got, err := imageref.Registry{}.Resolve(t.Context(), listentest.FreeAddr(t)+"/acme/web@"+d, nil)
	if err != nil || got != d {
		t.Fatalf("Resolve = %s, %v; want %s unasked", got, err, d)
	}
}

// A reference Docker cannot parse is refused as such, before any request.
func TestAReferenceThatIsNoneIsRefusedUnasked(t *testing.T) {
	_, err := imageref.Registry{}.Resolve(t.Context(), "Acme/Web:main", nil)
	var ie *imageref.Error
	if !errors.As(err, &ie) || !strings.HasPrefix(err.Error(), "image Acme/Web:main: ") || strings.Contains(err.Error(), "registry") {
		t.Fatalf("err %v, want an *imageref.Error about the reference itself", err)
	}
	t.Log(err)
}
