package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hatchery/hatchery/internal/api"
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
