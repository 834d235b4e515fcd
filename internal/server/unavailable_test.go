package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/apiclient"
	"github.com/hatchery/hatchery/internal/store"
)

// A store that cannot reach its database is not the server's failure: the
// answer is 503 unavailable with Retry-After, so clients and agents retry;
// any other error stays 500 internal.
func TestAnUnreachableDatabaseIsAnswered503(t *testing.T) {
	b := BuildTestServer(t, DefaultConfig(), TestWiring{})
	for _, tt := range []struct {
		err    error
		status int
		code   api.Code
	}{
		{fmt.Errorf("list hosts: %w: unexpected EOF", store.ErrUnavailable), http.StatusServiceUnavailable, api.CodeUnavailable},
		{errors.New("list hosts: disk on fire"), http.StatusInternalServerError, api.CodeInternal},
	} {
		rec := httptest.NewRecorder()
		b.Server.fail(rec, httptest.NewRequest("GET", "/api/v1/hosts", nil), "GET /api/v1/hosts", tt.err)
		var body api.Error
		if err := json.NewDecoder(rec.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		if rec.Code != tt.status || body.Code != tt.code {
			t.Fatalf("%v answered %d %+v, want %d %s", tt.err, rec.Code, body, tt.status, tt.code)
		}
		if tt.status == http.StatusServiceUnavailable && rec.Header().Get("Retry-After") == "" {
			t.Fatal("503 without Retry-After")
		}
	}
}

// A HEAD's answer has no body: the error's reason travels in a header,
// which the client reads, so `hatch apply` checking for a build context on
// a server whose database is down says why, not only "503 Service
// Unavailable".
func TestAHeadRefusedSaysWhyThroughTheClient(t *testing.T) {
	b := BuildTestServer(t, DefaultConfig(), TestWiring{})
	rec := httptest.NewRecorder()
	path := "/api/v1/blobs/sha256:" + strings.Repeat("ab", 32)
	b.Server.fail(rec, httptest.NewRequest(http.MethodHead, path, nil), "HEAD /api/v1/blobs/{digest}",
		fmt.Errorf("has blob: %w: connection refused", store.ErrUnavailable))
	resp := rec.Result()
	resp.Body = http.NoBody // what a client reads of a HEAD
	err := apiclient.ReadError(resp)
	var apiErr *apiclient.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable || apiErr.Code != string(api.CodeUnavailable) ||
		!strings.Contains(apiErr.Message, "database") {
		t.Fatalf("the client read %v (%+v), want 503 unavailable with the reason", err, apiErr)
	}
}
