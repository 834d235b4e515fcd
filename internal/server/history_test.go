package server

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
)

// historyYAML is a project of one egg whose env says its version, with a
// secret.
func historyYAML(version string) string {
	return `project: shop
eggs:
  web:
    image: web:1
    env: {VERSION: "` + version + `"}
    secrets: [key]
secrets:
  key: {env: KEY}
`
}

func (h *applyHarness) history(project string) api.ApplyHistory {
	h.t.Helper()
	return decode[api.ApplyHistory](h.t, h.do("GET", "/api/v1/projects/"+project+"/applies", nil), http.StatusOK)
}

func (h *applyHarness) rollbackResp(project, body string) *http.Response {
	h.t.Helper()
	return h.do("POST", "/api/v1/projects/"+project+"/rollback", strings.NewReader(body))
}

func (h *applyHarness) rollback(project, body string) api.Plan {
	h.t.Helper()
	return decode[api.Plan](h.t, h.rollbackResp(project, body), http.StatusCreated)
}

// webVersion is the VERSION the host's desired state gives web.
func (h *applyHarness) webVersion(host string) string {
	h.t.Helper()
	w, ok := h.desired(host).Workload("default/shop/web")
	if !ok {
		h.t.Fatalf("%s runs no web", host)
	}
	return w.Env["VERSION"]
}

func changeOf(p api.Plan, key string) api.Change {
	for _, c := range p.Changes {
		if c.Key == key {
			return c
		}
	}
	return api.Change{}
}

func TestHistoryListsAppliesAndARollbackAppliesAnEarlierOneAgain(t *testing.T) {
	h := newApplyHarness(t, applyOptions{})
	h.report("h1")
	wantSucceeded(t, h.applyAndWait("default/shop", historyYAML("v1"), map[string]string{"key": "s1"}))
	wantSucceeded(t, h.applyAndWait("default/shop", historyYAML("v2"), map[string]string{"key": "s2"}))

	hist := h.history("default/shop")
	if len(hist.Applies) != 2 || hist.Keep != 20 || hist.Project != "shop" || hist.Namespace != "default" {
		t.Fatalf("history %+v, want 2 applies of default/shop, keeping 20", hist)
	}
	v2, v1 := hist.Applies[0], hist.Applies[1]
	if v1.Actor != "admin" || v2.Actor != "admin" || v1.Outcome != "succeeded" || !v1.Rollbackable ||
		!strings.HasPrefix(v1.Digest, "sha256:") || v1.Digest == v2.Digest || v2.RollbackOf != 0 {
		t.Fatalf("applies %+v, want both by admin, rollbackable, with different digests", hist.Applies)
	}
	if v2.Summary != "~ egg/web [env], ~ secret/key [value]" || v1.Summary != "+ egg/web, + network/default, + secret/key" {
		t.Fatalf("summaries %q and %q", v1.Summary, v2.Summary)
	}

	// Without --to: the last successful apply before the newest, v1. Its
	// env comes back; the secret keeps its current value, and the plan
	// says so.
	p := h.rollback("default/shop", `{}`)
	if p.RollbackOf != v1.ID || changeOf(p, "egg/web").Action != "~" || changeOf(p, "secret/key").Action != "=" {
		t.Fatalf("rollback plan %+v, want web updated back to apply %d and the secret unchanged", p, v1.ID)
	}
	if len(p.Notes) != 1 || !strings.Contains(p.Notes[0], "secret/key: taken at its current value") {
		t.Fatalf("notes %q, want the secret's", p.Notes)
	}
	wantSucceeded(t, lastStep(h.follow(h.apply("default/shop", p.ID).Events)))
	if v := h.webVersion("h1"); v != "v1" {
		t.Fatalf("web at VERSION %q after the rollback, want v1", v)
	}
	hist = h.history("default/shop")
	rb := hist.Applies[0]
	if len(hist.Applies) != 3 || rb.RollbackOf != v1.ID || rb.Digest != v1.Digest || rb.Actor != "admin" || rb.Summary != "~ egg/web [env]" {
		t.Fatalf("history after the rollback %+v, want a rollback to %d with its digest", hist.Applies, v1.ID)
	}
	if evs := h.eventsOf("apply.started"); !strings.Contains(evs[len(evs)-1].Message, "a rollback to apply") {
		t.Fatalf("apply.started %+v, want it to say it is a rollback", evs[len(evs)-1])
	}

	// A rollback is an apply like any other: rolling it back goes to v2.
	again := h.rollback("default/shop", ``)
	if again.RollbackOf != v2.ID {
		t.Fatalf("rolling the rollback back: plan of apply %d, want %d", again.RollbackOf, v2.ID)
	}
	// --to names one; the same state gives a plan without changes.
	if same := h.rollback("default/shop", `{"to": `+itoa(v1.ID)+`}`); same.HasChanges {
		t.Fatalf("rollback to the apply running now: %+v, want no change", same)
	}
}

func TestARollbackRefusesWhatIsGoneAndChangesNothing(t *testing.T) {
	h := newApplyHarness(t, applyOptions{keepApplies: 3, blobGrace: time.Nanosecond})
	h.report("h1")
	wantError(t, h.rollbackResp("default/shop", `{}`), http.StatusNotFound, "not_found", "no apply to roll back to")
	wantError(t, h.do("GET", "/api/v1/projects/default/shop/applies", nil), http.StatusNotFound, "not_found", "no project")

	// v1 is built from an uploaded blob, v2 from an image.
	content := []byte("FROM scratch\n")
	digest := digestOf(content)
	if resp := h.do("PUT", "/api/v1/blobs/"+digest, bytes.NewReader(content)); resp.StatusCode/100 != 2 {
		t.Fatalf("upload: %d", resp.StatusCode)
	}
	built := `{"resources":[{"type":"egg","name":"web","source":"` + digest + `","inputs":` + eggInputsJSON(t) + `}]}`
	p := decode[api.Plan](t, h.do("POST", "/api/v1/projects/default/shop/plan", strings.NewReader(built)), http.StatusCreated)
	wantSucceeded(t, lastStep(h.follow(h.apply("default/shop", p.ID).Events)))
	v1 := h.history("default/shop").Applies[0]
	wantError(t, h.rollbackResp("default/shop", `{}`), http.StatusNotFound, "not_found", "no successful apply before")
	wantSucceeded(t, h.applyAndWait("default/shop", "project: shop\neggs:\n  web: {image: web:2}\n", nil))

	// Blob collection keeps what the kept applies were built from.
	if err := h.fleet.CollectBlobs(t.Context()); err != nil {
		t.Fatal(err)
	}
	if p := h.rollback("default/shop", `{}`); p.RollbackOf != v1.ID || !p.HasChanges {
		t.Fatalf("rollback plan %+v, want apply %d's build back", p, v1.ID)
	}
	// A blob lost anyway (a data dir restored from an old backup) is named
	// before anything changes.
	hex := strings.TrimPrefix(digest, "sha256:")
	if err := os.Rename(filepath.Join(h.dir, "blobs", "sha256", hex[:2], hex), filepath.Join(h.dir, "lost")); err != nil {
		t.Fatal(err)
	}
	before := len(h.history("default/shop").Applies)
	wantError(t, h.rollbackResp("default/shop", `{}`), http.StatusGone, "gone", "blob "+digest)
	if after := len(h.history("default/shop").Applies); after != before {
		t.Fatalf("a refused rollback left %d applies, was %d", after, before)
	}

	// A secret the project no longer has: its value is gone.
	wantSucceeded(t, h.applyAndWait("default/shop", historyYAML("v3"), map[string]string{"key": "s"}))
	withSecret := h.history("default/shop").Applies[0]
	wantSucceeded(t, h.applyAndWait("default/shop", "project: shop\neggs:\n  web: {image: web:4}\n", nil))
	wantError(t, h.rollbackResp("default/shop", `{"to": `+itoa(withSecret.ID)+`}`), http.StatusGone, "gone", "secret/key")

	// Past --keep-applies (3 here), an apply is too old (that its blob
	// is then released is storetest's RunApplyHistory).
	wantError(t, h.rollbackResp("default/shop", `{"to": `+itoa(v1.ID)+`}`), http.StatusGone, "gone", "too old")

	// Bad requests name the field.
	wantError(t, h.rollbackResp("default/shop", `{"to": -1}`), http.StatusBadRequest, "bad_request", "to:")
	wantError(t, h.rollbackResp("default/shop", `{"to": 9999}`), http.StatusNotFound, "not_found", "no apply 9999")
	wantError(t, h.rollbackResp("default/shop", `{"too": 1}`), http.StatusBadRequest, "bad_request", "too")

	// A destroy is not something to roll back to.
	d := decode[api.Plan](t, h.do("POST", "/api/v1/projects/default/shop/destroy", strings.NewReader(`{}`)), http.StatusCreated)
	wantSucceeded(t, lastStep(h.follow(h.apply("default/shop", d.ID).Events)))
	destroyed := h.history("default/shop").Applies[0]
	if !strings.HasPrefix(destroyed.Summary, "destroy: ") || !strings.Contains(destroyed.Summary, "- egg/web") || destroyed.Rollbackable {
		t.Fatalf("destroy record %+v", destroyed)
	}
	wantError(t, h.rollbackResp("default/shop", `{"to": `+itoa(destroyed.ID)+`}`), http.StatusBadRequest, "bad_request", "destroyed")
}

func TestARollbackSaysAVolumeDeletedSinceIsCreatedEmpty(t *testing.T) {
	h := newApplyHarness(t, applyOptions{})
	h.report("h1")
	yaml := "project: data\neggs:\n  db: {image: pg:1, volumes: [\"pgdata:/d\"]}\nvolumes:\n  pgdata: {}\n"
	wantSucceeded(t, h.applyAndWait("default/data", yaml, nil))
	v1 := h.history("default/data").Applies[0]
	// Kept while only left out of the file: no note.
	wantSucceeded(t, h.applyAndWait("default/data", "project: data\neggs:\n  db: {image: pg:2}\n", nil))
	if p := h.rollback("default/data", `{}`); len(p.Notes) != 0 {
		t.Fatalf("notes %q for a volume still there", p.Notes)
	}
	d := decode[api.Plan](t, h.do("POST", "/api/v1/projects/default/data/destroy", strings.NewReader(`{"volumes": true}`)), http.StatusCreated)
	wantSucceeded(t, lastStep(h.follow(h.apply("default/data", d.ID).Events)))
	p := h.rollback("default/data", `{"to": `+itoa(v1.ID)+`}`)
	if len(p.Notes) != 1 || !strings.Contains(p.Notes[0], "volume/pgdata is gone") || !strings.Contains(p.Notes[0], "created empty") ||
		changeOf(p, "volume/pgdata").Action != "+" {
		t.Fatalf("rollback plan %+v, want volume/pgdata created, with a note that it is empty", p)
	}
}
