package docker

import (
	"context"
	"errors"
	"io"
	"testing"

	"go.uber.org/zap/zaptest"
)

// testConfig is DefaultConfig with every dependency an Engine needs: the
// test's logger, an ingress with nothing to drain, no blobs, and a change
// callback that does nothing. Tests that watch one of them replace it.
func testConfig(t testing.TB, hostID string) Config {
	cfg := DefaultConfig(hostID)
	cfg.Logger = zaptest.NewLogger(t)
	cfg.Blobs = noBlobs{}
	cfg.Ingress = idleIngress{}
	cfg.OnChange = func() {}
	return cfg
}

// noBlobs is a blob source that has none.
type noBlobs struct{}

func (noBlobs) OpenBlob(_ context.Context, digest string) (io.ReadCloser, error) {
	return nil, errors.New("no blob " + digest + " in this test")
}

// idleIngress is an ingress with no requests in flight: drains end at once.
type idleIngress struct{}

func (idleIngress) Drain(context.Context, string) error { return nil }
func (idleIngress) Gone(string)                         {}
