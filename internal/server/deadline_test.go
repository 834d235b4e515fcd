package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/apiclient"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/pki/authority"
	"github.com/hatchery/hatchery/internal/server"
	"github.com/hatchery/hatchery/internal/store"
)

// stuckCertificates is a dependency that answers only when its caller's
// context ends, with the error the call makes of that.
type stuckCertificates struct {
	fail func(ctx context.Context) error
}

func (s stuckCertificates) Certificates(ctx context.Context) ([]api.Certificate, error) {
	<-ctx.Done()
	return nil, s.fail(ctx)
}

// A request that outlasts its deadline is answered, over the TLS the server
// really serves, before the connection's own deadline cuts it (an answer
// after it never arrives whole): 503 timeout,
// naming the deadline and the flag that raises it. Never a broken connection
// ("tls: bad record MAC"), nor "the database is unreachable", which is what
// PostgreSQL's store makes of a query cut short by the request's deadline
// (context.DeadlineExceeded is a net.Error), nor "internal".
func TestARequestThatOutlastsItsDeadlineIsToldSo(t *testing.T) {
	for name, fail := range map[string]func(ctx context.Context) error{
		"cut short, as if the database were gone": func(ctx context.Context) error {
			return fmt.Errorf("list certificates: %w: %w", store.ErrUnavailable, ctx.Err())
		},
		"cut short": func(ctx context.Context) error { return fmt.Errorf("list certificates: %w", ctx.Err()) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			material, err := authority.LoadOrCreate(filepath.Join(dir, "tls"), authority.DefaultNames(), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			tok := pki.NewToken(pki.KindAdmin, material.Fingerprint())
			cfg := server.DefaultConfig()
			cfg.RequestTimeout = time.Second
			srv := server.BuildTestServer(t, cfg, server.TestWiring{Dir: dir, AdminHash: tok.Hash(),
				Fingerprint: material.Fingerprint(), TLS: stuckCertificates{fail}}).Server
			hs := newTLSServer(material, srv.Handler())
			t.Cleanup(hs.Close)
			c, err := client.New(client.Config{Server: hs.URL, Token: tok.String()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)

			err = c.Do(t.Context(), "GET", "/api/v1/certificates", nil, nil)
			var apiErr *apiclient.APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("GET /api/v1/certificates past its deadline: %v, want the server's answer", err)
			}
			if apiErr.StatusCode != http.StatusServiceUnavailable || apiErr.Code != string(api.CodeTimeout) {
				t.Fatalf("answer %d %s (%q), want 503 timeout", apiErr.StatusCode, apiErr.Code, apiErr.Message)
			}
			for _, want := range []string{"took longer than 1s", "GET /api/v1/certificates", "try again", "--request-timeout"} {
				if !strings.Contains(apiErr.Message, want) {
					t.Fatalf("message %q does not say %q", apiErr.Message, want)
				}
			}
			if strings.Contains(apiErr.Message, "database") {
				t.Fatalf("message %q blames the database", apiErr.Message)
			}
		})
	}
}
