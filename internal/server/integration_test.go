package server

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/pki"
)

// buildHatch builds the real binary into a temporary directory.
func buildHatch(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "hatch")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/hatchery/hatchery/cmd/hatch")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// process is a running `hatch server`.
type process struct {
	cmd    *exec.Cmd
	url    string
	stdout string // what it printed before it said where it listens
}

func startServer(t *testing.T, bin, dataDir string) *process {
	t.Helper()
	cmd := exec.Command(bin, "server", "--listen", "127.0.0.1:0", "--data-dir", dataDir, "--liveness-timeout", "2s", "--cli-config", "-")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	p := &process{cmd: cmd}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if url, ok := strings.CutPrefix(line, "server URL on this machine: "); ok {
			p.url = url
		}
		if _, ok := strings.CutPrefix(line, "hatch server listening on "); ok {
			if !strings.HasPrefix(p.url, "https://") {
				t.Fatalf("the server serves %q, want https by default", p.url)
			}
			go io.Copy(io.Discard, out)
			return p
		}
		p.stdout += line + "\n"
	}
	t.Fatalf("the server never said where it listens; stdout %q", p.stdout)
	return nil
}

// writer sends a stream of writes and remembers which were acknowledged.
type writer struct {
	url, token string
	client     *http.Client
	stop       atomic.Bool
	mu         sync.Mutex        // guards the fields below
	acked      map[string]int    // host -> last acknowledged report number
	sent       map[string]int    // host -> last report number sent
	blobs      map[string][]byte // acknowledged blobs by digest
}

func (w *writer) do(method, path string, body []byte) (int, error) {
	req, err := http.NewRequest(method, w.url+path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+w.token)
	resp, err := w.client.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// reportLoop posts numbered reports for a host until stopped or the server dies.
func (w *writer) reportLoop(host string, start int, every time.Duration) {
	for n := start; !w.stop.Load(); n++ {
		body, _ := json.Marshal(contract.StatusReport{HostID: host, Version: "n" + strconv.Itoa(n), Time: time.Now()})
		w.mu.Lock()
		w.sent[host] = n
		w.mu.Unlock()
		code, err := w.do("POST", "/api/v1/hosts/"+host+"/status", body)
		if err != nil {
			return // the server is gone
		}
		if code == http.StatusNoContent {
			w.mu.Lock()
			w.acked[host] = n
			w.mu.Unlock()
		}
		time.Sleep(every)
	}
}

func (w *writer) blobLoop() {
	for !w.stop.Load() {
		content := make([]byte, 4096)
		rand.Read(content)
		d := digestOf(content)
		code, err := w.do("PUT", "/api/v1/blobs/"+d, content)
		if err != nil {
			return
		}
		if code == http.StatusCreated {
			w.mu.Lock()
			w.blobs[d] = content
			w.mu.Unlock()
		}
	}
}

func TestSIGKILLDuringWritesLosesNothingAcknowledged(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	bin := buildHatch(t)
	dataDir := t.TempDir()
	first := startServer(t, bin, dataDir)
	if !strings.Contains(first.stdout, "admin token") {
		t.Fatalf("the first start printed no admin token: %q", first.stdout)
	}
	tokenBytes, err := os.ReadFile(filepath.Join(dataDir, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tokenBytes))
	hosts := []string{"h1", "h2", "h3"}

	w := &writer{url: first.url, token: token, client: pinnedClient(t, token),
		acked: map[string]int{}, sent: map[string]int{}, blobs: map[string][]byte{}}
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Go(func() { w.reportLoop(h, 1, 0) })
	}
	wg.Go(w.blobLoop)
	time.Sleep(1500 * time.Millisecond)
	if err := first.cmd.Process.Kill(); err != nil { // SIGKILL, mid-stream
		t.Fatal(err)
	}
	wg.Wait()
	_ = first.cmd.Wait()
	for _, h := range hosts {
		if w.acked[h] < 10 {
			t.Fatalf("only %d reports of %s acknowledged before the kill: the test wrote too little", w.acked[h], h)
		}
	}
	t.Logf("acknowledged before SIGKILL: reports %v, blobs %d", w.acked, len(w.blobs))

	// The database is sound after the kill.
	db, err := sql.Open("sqlite", filepath.Join(dataDir, "hatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	var check string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check = %q, %v", check, err)
	}
	db.Close()

	second := startServer(t, bin, dataDir)
	if strings.Contains(second.stdout, "admin token") {
		t.Fatal("a restart printed the admin token again")
	}
	w2 := &writer{url: second.url, token: token, client: pinnedClient(t, token),
		acked: map[string]int{}, sent: map[string]int{}, blobs: map[string][]byte{}}

	// Every acknowledged report is there (or the one in flight at the kill).
	for _, h := range hosts {
		var view struct {
			State  string
			Status contract.StatusReport
		}
		getJSON(t, w2, "/api/v1/hosts/"+h, &view)
		n, _ := strconv.Atoi(strings.TrimPrefix(view.Status.Version, "n"))
		if n < w.acked[h] || n > w.sent[h] {
			t.Errorf("%s: report n%d after the restart, want between the last acknowledged n%d and the last sent n%d", h, n, w.acked[h], w.sent[h])
		}
		if view.State == "down" {
			t.Errorf("%s is down right after the restart", h)
		}
	}
	// Every acknowledged blob is there, whole.
	for d, content := range w.blobs {
		req, _ := http.NewRequest("GET", second.url+"/api/v1/blobs/"+d, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := w2.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Equal(got, content) {
			t.Fatalf("blob %s after the restart: %d, %d bytes", d, resp.StatusCode, len(got))
		}
	}

	// The agents go on reporting every 500 ms; a restart marks none of them
	// down, over more than a liveness period.
	var events struct{ Events []api.Event }
	getJSON(t, w2, "/api/v1/events?limit=1000", &events)
	var since int64
	if n := len(events.Events); n > 0 {
		since = events.Events[n-1].Seq
	}
	for _, h := range hosts {
		wg.Go(func() { w2.reportLoop(h, 1_000_000, 500*time.Millisecond) })
	}
	time.Sleep(3 * time.Second) // the liveness timeout is 2 s
	w2.stop.Store(true)
	wg.Wait()
	getJSON(t, w2, "/api/v1/events?limit=1000&since="+strconv.FormatInt(since, 10), &events)
	for _, e := range events.Events {
		if e.Type == "host.down" {
			t.Errorf("after the restart: %s %s", e.Type, e.Message)
		}
	}
	var list struct{ Hosts []api.Host }
	getJSON(t, w2, "/api/v1/hosts", &list)
	for _, h := range list.Hosts {
		if h.State != "up" {
			t.Errorf("host %s is %s while reporting", h.ID, h.State)
		}
	}

	// SIGTERM shuts down cleanly.
	if err := second.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := second.cmd.Wait(); err != nil {
		t.Fatalf("graceful shutdown: %v", err)
	}
}

// pinnedClient trusts only the server whose CA the token's fingerprint names,
// as every client of the real server must.
func pinnedClient(t *testing.T, token string) *http.Client {
	t.Helper()
	tok, err := pki.ParseToken(token)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := pki.ClientConfig(tok.Fingerprint, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
}

func getJSON(t *testing.T, w *writer, path string, v any) {
	t.Helper()
	req, _ := http.NewRequest("GET", w.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+w.token)
	resp, err := w.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}
