package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestConfigFromEnv(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    Config
		wantErr string
	}{
		{name: "defaults listen on 8080 and do nothing special", env: nil, want: Config{Port: 8080}},
		{
			name: "every variable is read",
			env: map[string]string{
				"APP_PORT": "9000", "APP_VERSION": "v2", "APP_BOOT_DELAY": "3s", "APP_CRASH_AFTER": "1m",
				"APP_UNHEALTHY_AFTER": "500ms", "APP_JOB": "1", "APP_JOB_EXIT": "3", "APP_COUNT_FILE": "/data/n",
				"APP_ECHO_PORT": "7000", "APP_IGNORE_STOP": "true",
			},
			want: Config{
				Port: 9000, Version: "v2", BootDelay: 3 * time.Second, CrashAfter: time.Minute,
				UnhealthyAfter: 500 * time.Millisecond, Job: true, JobExit: 3, CountFile: "/data/n",
				Echo: true, EchoPort: 7000, IgnoreStop: true,
			},
		},
		{name: "echo port 0 still turns echo on", env: map[string]string{"APP_ECHO_PORT": "0"}, want: Config{Port: 8080, Echo: true}},
		{name: "a bad duration names its variable", env: map[string]string{"APP_CRASH_AFTER": "soon"}, wantErr: "APP_CRASH_AFTER"},
		{name: "a negative duration is refused", env: map[string]string{"APP_BOOT_DELAY": "-1s"}, wantErr: "APP_BOOT_DELAY"},
		{name: "a bad port names its variable", env: map[string]string{"APP_PORT": "http"}, wantErr: "APP_PORT"},
		{name: "a port past 65535 is refused", env: map[string]string{"APP_ECHO_PORT": "70000"}, wantErr: "out of range"},
		{name: "a bad boolean names its variable", env: map[string]string{"APP_JOB": "yes please"}, wantErr: "APP_JOB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ConfigFromEnv(envOf(tt.env))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// fakeClock is a settable clock for the health endpoint.
type fakeClock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func get(t *testing.T, h http.Handler, method, target string, body string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, strings.NewReader(body)))
	return rec.Code, rec.Body.String()
}

func TestHealthzTurnsUnhealthyAfterTheDelay(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	h := newApp(Config{UnhealthyAfter: 5 * time.Second}, clock.now, envOf(nil)).routes()
	if code, _ := get(t, h, "GET", "/healthz", ""); code != http.StatusOK {
		t.Fatalf("at start: %d, want 200", code)
	}
	clock.advance(4999 * time.Millisecond)
	if code, _ := get(t, h, "GET", "/healthz", ""); code != http.StatusOK {
		t.Fatalf("just before the delay: %d, want 200", code)
	}
	clock.advance(time.Millisecond)
	if code, _ := get(t, h, "GET", "/healthz", ""); code != http.StatusServiceUnavailable {
		t.Fatalf("at the delay: %d, want 503", code)
	}
}

func TestHealthzStaysHealthyWithoutADelay(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	h := newApp(Config{}, clock.now, envOf(nil)).routes()
	clock.advance(1000 * time.Hour)
	if code, _ := get(t, h, "GET", "/healthz", ""); code != http.StatusOK {
		t.Fatalf("got %d, want 200", code)
	}
}

func TestVersionServesTheConfiguredVersion(t *testing.T) {
	h := newApp(Config{Version: "v7"}, time.Now, envOf(nil)).routes()
	code, body := get(t, h, "GET", "/version", "")
	if code != 200 || strings.TrimSpace(body) != "v7" {
		t.Fatalf("got %d %q, want 200 v7", code, body)
	}
}

func TestHitCountsSurviveANewProcessOnTheSameFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "count")
	first := newApp(Config{CountFile: path}, time.Now, envOf(nil)).routes()
	for want := 1; want <= 3; want++ {
		code, body := get(t, first, "POST", "/hit", "")
		if code != 200 || strings.TrimSpace(body) != strconv.Itoa(want) {
			t.Fatalf("hit %d: got %d %q", want, code, body)
		}
	}
	// A second app on the same file is the container after a stop and a start.
	second := newApp(Config{CountFile: path}, time.Now, envOf(nil)).routes()
	if code, body := get(t, second, "GET", "/count", ""); code != 200 || strings.TrimSpace(body) != "3" {
		t.Fatalf("count after restart: got %d %q, want 3", code, body)
	}
	if code, body := get(t, second, "POST", "/hit", ""); strings.TrimSpace(body) != "4" {
		t.Fatalf("hit after restart: got %d %q, want 4", code, body)
	}
}

func TestCountWithoutAFileIsNotFound(t *testing.T) {
	h := newApp(Config{}, time.Now, envOf(nil)).routes()
	for _, req := range [][2]string{{"POST", "/hit"}, {"GET", "/count"}} {
		if code, _ := get(t, h, req[0], req[1], ""); code != http.StatusNotFound {
			t.Errorf("%s %s: %d, want 404", req[0], req[1], code)
		}
	}
}

func TestCountOfAMissingFileIsZero(t *testing.T) {
	h := newApp(Config{CountFile: filepath.Join(t.TempDir(), "none")}, time.Now, envOf(nil)).routes()
	if code, body := get(t, h, "GET", "/count", ""); code != 200 || strings.TrimSpace(body) != "0" {
		t.Fatalf("got %d %q, want 0", code, body)
	}
}

func TestCounterLosesNoConcurrentIncrementAndLeavesNoTempFile(t *testing.T) {
	dir := t.TempDir()
	c := newCounter(filepath.Join(dir, "count"))
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Add(); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n, err := c.Value(); err != nil || n != 20 {
		t.Fatalf("value = %d, %v; want 20", n, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("dir holds %d files, want only the count file", len(entries))
	}
}

func TestCounterRefusesAGarbledFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "count")
	os.WriteFile(path, []byte("many\n"), 0o644)
	if _, err := newCounter(path).Add(); err == nil {
		t.Fatal("Add on a garbled file succeeded")
	}
}

func TestEnvAnswersOneVariable(t *testing.T) {
	h := newApp(Config{}, time.Now, envOf(map[string]string{"GREETING": "hello"})).routes()
	if code, body := get(t, h, "GET", "/env/GREETING", ""); code != 200 || body != "hello" {
		t.Fatalf("got %d %q", code, body)
	}
	if code, _ := get(t, h, "GET", "/env/MISSING", ""); code != 404 {
		t.Fatalf("missing variable: %d, want 404", code)
	}
}

func TestFileReadsAndWrites(t *testing.T) {
	dir := t.TempDir()
	h := newApp(Config{}, time.Now, envOf(nil)).routes()
	path := filepath.Join(dir, "f")
	if code, _ := get(t, h, "GET", "/file?path="+path, ""); code != 404 {
		t.Fatalf("read of a missing file: %d, want 404", code)
	}
	if code, _ := get(t, h, "PUT", "/file?path="+path, "data"); code != http.StatusNoContent {
		t.Fatalf("write: %d", code)
	}
	if code, body := get(t, h, "GET", "/file?path="+path, ""); code != 200 || body != "data" {
		t.Fatalf("read back: %d %q", code, body)
	}
	if code, _ := get(t, h, "PUT", "/file?path="+filepath.Join(dir, "no", "such", "dir"), "x"); code == http.StatusNoContent {
		t.Fatal("write into a missing directory succeeded")
	}
}

func TestWhoamiAnswersTheProcessIDs(t *testing.T) {
	h := newApp(Config{}, time.Now, envOf(nil)).routes()
	want := fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
	if _, body := get(t, h, "GET", "/whoami", ""); strings.TrimSpace(body) != want {
		t.Fatalf("got %q, want %q", body, want)
	}
}

func TestCheckPassesOn2xxAnd3xxOnly(t *testing.T) {
	tests := []struct {
		status int
		pass   bool
	}{
		{200, true}, {204, true}, {302, true}, {399, true}, {400, false}, {500, false}, {503, false},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.status), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/elsewhere" {
					w.WriteHeader(500) // a followed redirect would fail here
					return
				}
				if tt.status/100 == 3 {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(tt.status)
			}))
			defer srv.Close()
			err := check(context.Background(), srv.URL+"/healthz", time.Second)
			if (err == nil) != tt.pass {
				t.Fatalf("check = %v, want pass=%v", err, tt.pass)
			}
		})
	}
}

func TestCheckFailsWhenNothingListens(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	if err := check(context.Background(), "http://"+addr+"/healthz", time.Second); err == nil {
		t.Fatal("check against a closed port passed")
	}
}

func TestCheckTimesOutOnAHungServer(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	start := time.Now()
	if err := check(context.Background(), srv.URL, 100*time.Millisecond); err == nil {
		t.Fatal("check of a hung server passed")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("check took %s despite a 100ms timeout", took)
	}
}

func TestRunCheckFlagProbesTheOwnPort(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" || !healthy.Load() {
			w.WriteHeader(503)
		}
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	env := envOf(map[string]string{"APP_PORT": port})
	if code := run(context.Background(), []string{"-check"}, env, io.Discard, io.Discard); code != 0 {
		t.Fatalf("healthy: exit %d, want 0", code)
	}
	healthy.Store(false)
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"-check"}, env, io.Discard, &stderr); code != 1 {
		t.Fatalf("unhealthy: exit %d, want 1", code)
	}
	if !strings.Contains(stderr.String(), "503") {
		t.Errorf("stderr %q does not say why", stderr.String())
	}
}

func TestRunRefusesABadEnvironment(t *testing.T) {
	if code := run(context.Background(), nil, envOf(map[string]string{"APP_PORT": "x"}), io.Discard, io.Discard); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
}

func TestEchoSendsEveryLineBack(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveEcho(ctx, ln, log.New(io.Discard, "", 0)) }()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	for _, line := range []string{"hello", "", "second line"} {
		fmt.Fprintf(conn, "%s\n", line)
		got, err := r.ReadString('\n')
		if err != nil || got != line+"\n" {
			t.Fatalf("echo of %q = %q, %v", line, got, err)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("serveEcho did not return after cancel with a client still connected")
	}
}

// started runs serve in the background with free ports and returns its
// addresses and exit status channel.
func started(t *testing.T, ctx context.Context, cfg Config) (httpAddr, echoAddr net.Addr, exit <-chan int) {
	t.Helper()
	addrs := make(chan [2]net.Addr, 1)
	ch := make(chan int, 1)
	go func() {
		ch <- serve(ctx, cfg, envOf(nil), log.New(io.Discard, "", 0), func(h, e net.Addr) { addrs <- [2]net.Addr{h, e} })
	}()
	select {
	case a := <-addrs:
		return a[0], a[1], ch
	case code := <-ch:
		t.Fatalf("serve exited %d before listening", code)
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not listen within 10s")
	}
	return nil, nil, nil
}

func httpGet(t *testing.T, addr net.Addr, path string) (int, string) {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr.String())
	resp, err := http.Get("http://127.0.0.1:" + port + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServeStopsCleanlyWhenAsked(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addr, _, exit := started(t, ctx, Config{Version: "v1"})
	if code, body := httpGet(t, addr, "/version"); code != 200 || strings.TrimSpace(body) != "v1" {
		t.Fatalf("/version = %d %q", code, body)
	}
	cancel()
	if code := <-exit; code != 0 {
		t.Fatalf("exit %d after a stop, want 0", code)
	}
}

func TestServeCrashesAfterTheDelay(t *testing.T) {
	start := time.Now()
	_, _, exit := started(t, context.Background(), Config{CrashAfter: 200 * time.Millisecond})
	select {
	case code := <-exit:
		if code != 1 {
			t.Fatalf("exit %d, want 1", code)
		}
		if took := time.Since(start); took < 200*time.Millisecond {
			t.Fatalf("crashed after %s, before the 200ms asked", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no crash within 10s")
	}
}

func TestServeListensOnlyAfterTheBootDelay(t *testing.T) {
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started(t, ctx, Config{BootDelay: 300 * time.Millisecond})
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("listening after %s, before the 300ms boot delay", took)
	}
}

func TestServeRunsTheEchoBesideHTTP(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	_, echo, exit := started(t, ctx, Config{Echo: true})
	if echo == nil {
		t.Fatal("no echo listener")
	}
	_, port, _ := net.SplitHostPort(echo.String())
	conn, err := net.Dial("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(conn, "ping")
	got, _ := bufio.NewReader(conn).ReadString('\n')
	conn.Close()
	if got != "ping\n" {
		t.Fatalf("echo = %q", got)
	}
	cancel()
	if code := <-exit; code != 0 {
		t.Fatalf("exit %d", code)
	}
}

func TestJobCountsOneRunAndExitsWithItsStatus(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs")
	for run, exitWant := range []int{0, 3} {
		code := serve(context.Background(), Config{Job: true, JobExit: exitWant, CountFile: path}, envOf(nil), log.New(io.Discard, "", 0), nil)
		if code != exitWant {
			t.Fatalf("run %d: exit %d, want %d", run, code, exitWant)
		}
		if n, _ := newCounter(path).Value(); n != run+1 {
			t.Fatalf("after run %d the count is %d", run, n)
		}
	}
}

func TestStopSignalIsLoggedByName(t *testing.T) {
	var out syncBuffer
	logger := log.New(&out, "", 0)
	ctx, stop := stopOnSignal(context.Background(), false, logger)
	defer stop()
	syscall.Kill(os.Getpid(), syscall.SIGUSR1)
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("SIGUSR1 did not stop the app")
	}
	if !strings.Contains(out.String(), "received SIGUSR1") {
		t.Fatalf("log %q does not name the signal", out.String())
	}
}

func TestIgnoredStopSignalDoesNotStop(t *testing.T) {
	var out syncBuffer
	ctx, stop := stopOnSignal(context.Background(), true, log.New(&out, "", 0))
	defer stop()
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "ignoring") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if ctx.Err() != nil {
		t.Fatal("an ignored SIGTERM stopped the app")
	}
	if !strings.Contains(out.String(), "received SIGTERM, ignoring it") {
		t.Fatalf("log %q", out.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func TestDNSResolvesANameAndRefusesAnUnknownOne(t *testing.T) {
	h := newApp(Config{}, time.Now, envOf(nil)).routes()
	if code, body := get(t, h, "GET", "/dns/localhost", ""); code != 200 || !strings.Contains(body, "127.0.0.1") {
		t.Fatalf("localhost: %d %q", code, body)
	}
	if code, _ := get(t, h, "GET", "/dns/no-such-name.invalid", ""); code != 404 {
		t.Fatalf("unknown name: %d, want 404", code)
	}
}

func TestExitRunsTheJobOnceWithThatCodeAndSaysItsVersion(t *testing.T) {
	count := filepath.Join(t.TempDir(), "count")
	env := envOf(map[string]string{"APP_VERSION": "from-env", "APP_COUNT_FILE": count})
	for i, code := range []int{3, 0} {
		var out strings.Builder
		if got := run(context.Background(), []string{"-exit", strconv.Itoa(code)}, env, &out, io.Discard); got != code {
			t.Fatalf("exit %d, want %d", got, code)
		}
		for _, want := range []string{fmt.Sprintf("job run %d", i+1), "job version from-env", fmt.Sprintf("job done, exit %d", code)} {
			if !strings.Contains(out.String(), want) {
				t.Fatalf("output %q lacks %q", out.String(), want)
			}
		}
	}
}

func TestAppendAndFailAreHooksThatLeaveATraceOrRefuse(t *testing.T) {
	file := filepath.Join(t.TempDir(), "order")
	var out, errOut bytes.Buffer
	for _, line := range []string{"before", "after"} {
		if code := run(context.Background(), []string{"-append", file + "=" + line}, func(string) string { return "" }, &out, &errOut); code != 0 {
			t.Fatalf("-append %s: exit %d: %s", line, code, errOut.String())
		}
	}
	if b, _ := os.ReadFile(file); string(b) != "before\nafter\n" {
		t.Fatalf("file after two appends: %q", b)
	}
	errOut.Reset()
	if code := run(context.Background(), []string{"-fail", "checkpoint refused"}, func(string) string { return "" }, &out, &errOut); code != 3 ||
		!strings.Contains(errOut.String(), "checkpoint refused") {
		t.Fatalf("-fail: exit %d, stderr %q; want 3 and the message", code, errOut.String())
	}
}
