package server

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/hatchery/hatchery/internal/api"
)

const secretYAML = `
project: shop
eggs:
  web:
    image: web:1
    secrets: [api_key]
    env: {API_KEY: "${secret.api_key}", MODE: prod}
  plain:
    image: plain:1
secrets:
  api_key: {env: API_KEY}
`

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Sync() error { return nil }

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// TestSecretValuesNeverLeak runs a project with a secret through plan,
// apply, a rotation, rollouts and every read of the API, logging everything
// at debug level, then looks for the values in every answer, every log line,
// every event and the database files: none may hold them, while the desired
// state the host's agent reads does.
func TestSecretValuesNeverLeak(t *testing.T) {
	values := []string{"s3cr3t-VALUE-one-7f1c", "s3cr3t-VALUE-two-9d2e"}
	lw := newLeakWatch(t)
	h, logs, answers, call := lw.h, lw.logs, &lw.answers, lw.call

	h.report("h1")
	for i, v := range values {
		var plan api.Plan
		body := planBody(t, secretYAML, map[string]string{"api_key": v})
		if err := json.Unmarshal(call("POST", "/api/v1/projects/default/shop/plan", string(body)), &plan); err != nil {
			t.Fatal(err)
		}
		for _, c := range plan.Changes {
			if c.Key == "secret/api_key" && (c.Inputs["value"] != api.Sensitive || i == 1 && strings.Join(c.Changed, ",") != "value") {
				t.Fatalf("the plan shows the secret as %+v, want its value (sensitive) and, on rotation, changed [value]", c)
			}
		}
		var started applyStarted
		if err := json.Unmarshal(call("POST", "/api/v1/projects/default/shop/apply", `{"plan":"`+plan.ID+`"}`), &started); err != nil {
			t.Fatal(err)
		}
		resp := h.do("GET", started.Events, nil)
		raw, _ := io.ReadAll(resp.Body)
		answers.Write(raw)
		if !strings.Contains(string(raw), `"outcome":"succeeded"`) {
			t.Fatalf("apply %d: %s", i, raw)
		}
		call("GET", "/api/v1/projects/default/shop/applies/"+strconv.FormatInt(started.Apply.ID, 10), "")
		// The agent gets the value: only in the desired state of its host.
		d := h.desired("h1")
		w, _ := d.Workload("default/shop/web")
		if len(w.Secrets) != 1 || string(w.Secrets[0].Value) != v {
			t.Fatalf("apply %d: the host gets secrets %+v, want the value", i, w.Secrets)
		}
		h.healthy("h1")
		// The status works from the same desired state, values sealed and left so.
		var status api.ProjectStatus
		if err := json.Unmarshal(call("GET", "/api/v1/projects/default/shop/status", ""), &status); err != nil {
			t.Fatal(err)
		}
		if len(status.Eggs) != 2 || status.Eggs[1].Name != "web" || status.Eggs[1].Ready != 1 || status.Eggs[1].Rollout.State != api.RolloutDone {
			t.Fatalf("apply %d: status %+v, want web ready and done", i, status)
		}
	}
	call("POST", "/api/v1/projects/default/shop/eggs/web/restart", "")
	call("GET", "/api/v1/projects", "")
	call("GET", "/api/v1/projects/default/shop", "")
	call("GET", "/api/v1/projects/default/shop/status", "")
	call("GET", "/api/v1/hosts", "")
	call("GET", "/api/v1/hosts/h1", "")
	call("GET", "/api/v1/events?limit=1000", "")
	call("GET", "/metrics", "")
	destroy := call("POST", "/api/v1/projects/default/shop/destroy", `{}`)
	var plan api.Plan
	if err := json.Unmarshal(destroy, &plan); err != nil {
		t.Fatal(err)
	}
	resp := h.do("GET", h.apply("default/shop", plan.ID).Events, nil)
	raw, _ := io.ReadAll(resp.Body)
	answers.Write(raw)

	events, files := eventsAndFiles(t, h)
	if n := bytes.Count(events, []byte("\n")); n < 10 || !bytes.Contains(events, []byte("secret/api_key updated")) {
		t.Fatalf("only %d events, or none for the secret's update: the test would prove nothing", n)
	}
	if len(files) == 0 || logs.buf.Len() == 0 || answers.Len() == 0 {
		t.Fatal("nothing was captured")
	}
	for _, v := range values {
		for what, b := range map[string][]byte{"an API answer": answers.Bytes(), "a log line": logs.Bytes(),
			"an event": events, "the database files": files} {
			if bytes.Contains(b, []byte(v)) {
				t.Errorf("%s holds the secret value %s", what, v)
			}
		}
	}
}

const certYAML = `
project: shop
eggs:
  web:
    image: web:1
    port: 8080
    routes: [{host: own.example.com, tls: {cert: "${secret.crt}", key: "${secret.key}"}}]
secrets:
  crt: {env: CRT}
  key: {env: KEY}
`

// The private key of a route's own certificate reaches the host's desired
// state and nothing else: no API answer, log line, event or database file.
func TestCertificateKeysNeverLeak(t *testing.T) {
	lw := newLeakWatch(t)
	h, logs, answers, call := lw.h, lw.logs, &lw.answers, lw.call
	h.report("h1")
	crt, key := selfSignedPEM(t, "own.example.com")
	var plan api.Plan
	if err := json.Unmarshal(call("POST", "/api/v1/projects/default/shop/plan", string(planBody(t, certYAML, map[string]string{"crt": crt, "key": key}))), &plan); err != nil {
		t.Fatal(err)
	}
	var started applyStarted
	if err := json.Unmarshal(call("POST", "/api/v1/projects/default/shop/apply", `{"plan":"`+plan.ID+`"}`), &started); err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(h.do("GET", started.Events, nil).Body)
	answers.Write(raw)
	if !strings.Contains(string(raw), `"outcome":"succeeded"`) {
		t.Fatalf("apply: %s", raw)
	}
	if c, ok := h.desired("h1").Certificate("own.example.com"); !ok || string(c.Key) != key {
		t.Fatal("the host does not get the certificate's key")
	}
	for _, p := range []string{"/api/v1/projects/default/shop", "/api/v1/projects/default/shop/status", "/api/v1/hosts/h1",
		"/api/v1/events?limit=1000", "/api/v1/certificates"} {
		call("GET", p, "")
	}
	events, files := eventsAndFiles(t, h)
	// The key's base64 body, line by line: a log would escape its newlines.
	for _, line := range strings.Split(key, "\n") {
		if len(line) < 32 || strings.HasPrefix(line, "-----") {
			continue
		}
		for what, b := range map[string][]byte{"an API answer": answers.Bytes(), "a log line": logs.Bytes(),
			"an event": events, "the database files": files} {
			if bytes.Contains(b, []byte(line)) {
				t.Errorf("%s holds the certificate's key", what)
			}
		}
	}
}

func selfSignedPEM(t *testing.T, host string) (string, string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(k)
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
}

const registryYAML = `
project: shop
eggs:
  web:
    image: ghcr.io/acme/web:1
  api:
    image: registry.example.com:5000/acme/api:1
secrets:
  ghcr_token: {env: GHCR_TOKEN}
registries:
  ghcr.io: {username: ci, password: "${secret.ghcr_token}"}
`

// A registry password, a project's or the cluster's, reaches the desired
// state of the hosts pulling from that registry and nothing else: no plan,
// API answer, log line, event or database file.
func TestRegistryPasswordsNeverLeak(t *testing.T) {
	const password, clusterPassword = "r3g1stry-PASSWORD-5a8b", "c1uster-PASSWORD-77e0"
	lw := newLeakWatch(t)
	h, logs, answers, call := lw.h, lw.logs, &lw.answers, lw.call
	h.report("h1")
	call("PUT", "/api/v1/registries/registry.example.com:5000", `{"username": "cluster-ci", "password": "`+clusterPassword+`"}`)
	var plan api.Plan
	if err := json.Unmarshal(call("POST", "/api/v1/projects/default/shop/plan", string(planBody(t, registryYAML, map[string]string{"ghcr_token": password}))), &plan); err != nil {
		t.Fatal(err)
	}
	var started applyStarted
	if err := json.Unmarshal(call("POST", "/api/v1/projects/default/shop/apply", `{"plan":"`+plan.ID+`"}`), &started); err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(h.do("GET", started.Events, nil).Body)
	answers.Write(raw)
	if !strings.Contains(string(raw), `"outcome":"succeeded"`) {
		t.Fatalf("apply: %s", raw)
	}
	w, _ := h.desired("h1").Workload("default/shop/web")
	if w.PullAuth == nil || w.PullAuth.Registry != "ghcr.io" || string(w.PullAuth.Password) != password {
		t.Fatalf("the host pulls with %+v, want ghcr.io's login with its password", w.PullAuth.WithoutPassword())
	}
	clustered, _ := h.desired("h1").Workload("default/shop/api")
	if a := clustered.PullAuth; a == nil || a.Username != "cluster-ci" || string(a.Password) != clusterPassword {
		t.Fatalf("api pulls with %+v, want the cluster's login with its password", a.WithoutPassword())
	}
	h.healthy("h1")
	for _, p := range []string{"/api/v1/projects/default/shop", "/api/v1/projects/default/shop/status", "/api/v1/projects/default/shop/applies",
		"/api/v1/hosts/h1", "/api/v1/hosts", "/api/v1/events?limit=1000", "/metrics", "/api/v1/registries"} {
		call("GET", p, "")
	}
	events, files := eventsAndFiles(t, h)
	if len(files) == 0 || logs.buf.Len() == 0 || answers.Len() == 0 || len(events) == 0 {
		t.Fatal("nothing was captured")
	}
	for what, b := range map[string][]byte{"an API answer (the plan included)": answers.Bytes(), "a log line": logs.Bytes(),
		"an event": events, "the database files": files} {
		for _, p := range []string{password, clusterPassword} {
			if bytes.Contains(b, []byte(p)) {
				t.Errorf("%s holds the registry password %s", what, p)
			}
		}
	}
}

// eventsAndFiles returns the messages of the event log, a line each, then
// stops the harness and returns its database files' bytes: where a leaked
// secret would rest.
func eventsAndFiles(t *testing.T, h *applyHarness) (events, files []byte) {
	t.Helper()
	evs, err := h.store.ListEvents(t.Context(), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var ev bytes.Buffer
	for _, e := range evs {
		ev.WriteString(e.Message + "\n")
	}
	h.stop()
	var db bytes.Buffer
	matches, _ := filepath.Glob(filepath.Join(h.dir, "hatch.db*"))
	for _, f := range matches {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		db.Write(b)
	}
	return ev.Bytes(), db.Bytes()
}

// leakWatch is an apply harness whose log lines and API answers are kept,
// for a test to search them for a value that must not be there.
type leakWatch struct {
	t       *testing.T
	h       *applyHarness
	logs    *syncBuffer
	answers bytes.Buffer
}

func newLeakWatch(t *testing.T) *leakWatch {
	logs := &syncBuffer{}
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), logs, zap.DebugLevel))
	return &leakWatch{t: t, h: newApplyHarness(t, applyOptions{logger: log}), logs: logs}
}

// read reads an answer's body, keeping it.
func (w *leakWatch) read(resp *http.Response) []byte {
	w.t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		w.t.Fatal(err)
	}
	w.answers.Write(b)
	return b
}

// call makes an API request and reads its answer, keeping it.
func (w *leakWatch) call(method, path, body string) []byte {
	w.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	return w.read(w.h.do(method, path, r))
}
