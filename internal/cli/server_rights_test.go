package cli

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/agent"
	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/apiclient"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/contract"
)

// Two servers on one PostgreSQL database: a token revoked and a host
// removed through server A end what they hold open on server B, which
// learns of it through its listening connection (issue 24, finding 7).
func TestARevocationThroughOneServerEndsWhatIsHeldOnAnother(t *testing.T) {
	servers := startTwoServers(t)
	ctx := t.Context()
	atA, err := client.New(servers.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer atA.Close()
	var ci api.AdminToken
	if err := atA.Do(ctx, http.MethodPost, "/api/v1/admin-tokens", api.CreateAdminTokenRequest{Name: "ci"}, &ci); err != nil {
		t.Fatal(err)
	}
	var join api.JoinToken
	if err := atA.Do(ctx, http.MethodPost, "/api/v1/join-tokens", api.CreateJoinTokenRequest{}, &join); err != nil {
		t.Fatal(err)
	}
	host, err := agent.JoinHost(ctx, t.TempDir(), servers.cfg.Server, join.Token, "node-1", zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	atB := func(token string) *client.Client {
		c, err := client.New(client.Config{Server: "https://" + servers.addrB, Token: token})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}

	types, streamEnded := make(chan string, 100), make(chan error, 1)
	go func() {
		streamEnded <- atB(ci.Token).Events().Follow(ctx, 0, func(e api.Event) error { types <- e.Type; return nil })
	}()
	select {
	case <-types: // the stream on B is live
	case <-time.After(30 * time.Second):
		t.Fatal("the stream on server B sent nothing")
	}
	pollEnded := make(chan error, 1)
	go func() {
		var out contract.SessionOffers
		pollEnded <- atB(host.Token).Do(ctx, http.MethodGet, "/api/v1/hosts/"+host.HostID+"/sessions?wait=2m", nil, &out)
	}()
	adminAtB := atB(servers.cfg.Token)
	eventually(t, 10*time.Second, "the stream and the poll held on B", func() bool {
		resp, err := adminAtB.Send(ctx, http.MethodGet, "/metrics", nil, "")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), "\nhatch_held_open 2\n")
	})

	if err := atA.Do(ctx, http.MethodDelete, "/api/v1/admin-tokens/ci", nil, nil); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	select {
	case <-streamEnded:
		t.Logf("the revoked token's stream on B ended %v after the revocation on A", time.Since(revoked))
	case <-time.After(5 * time.Second):
		t.Fatal("the revoked token's stream on server B was still open 5s after the revocation on A")
	}
	for len(types) > 0 {
		if typ := <-types; typ != "token.created" && typ != "host.joined" {
			t.Fatalf("the revoked token's stream on B received %s", typ)
		}
	}

	if err := atA.Do(ctx, http.MethodDelete, "/api/v1/hosts/"+host.HostID, nil, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-pollEnded:
		var apiErr *apiclient.APIError
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized || !strings.Contains(apiErr.Message, "removed") {
			t.Fatalf("the removed host's poll on server B ended with %v, want 401 saying it was removed", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the removed host's poll on server B was still held 15s after its removal on A")
	}
}
