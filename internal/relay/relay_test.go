package relay

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/testutil/listentest"
)

// agentSocket stands for the agent: a Unix socket that echoes each line back
// upper-cased and, at the client's half-close, writes "bye" and closes.
func agentSocket(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "relay.sock")
	listentest.Serve(t, "unix", path, func(c net.Conn) {
		defer c.Close()
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			if _, err := io.WriteString(c, strings.ToUpper(sc.Text())+"\n"); err != nil {
				return
			}
		}
		io.WriteString(c, "bye\n")
	})
	return path
}

// startRelay runs Run on a free loopback port and returns its address and a
// stop function that waits for Run to return.
func startRelay(t *testing.T, socket string) (string, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := DefaultConfig()
	cfg.Listen, cfg.Socket, cfg.Logger = addr, socket, zaptest.NewLogger(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("relay never listened: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	var once sync.Once
	stop := func() { once.Do(func() { waitRun(t, cancel, done) }) }
	t.Cleanup(stop)
	return addr, stop
}

// waitRun ends Run's context and waits for it to return.
func waitRun(t *testing.T, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

func TestRelayPassesBothWaysAndHalfClose(t *testing.T) {
	addr, _ := startRelay(t, agentSocket(t))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	for _, line := range []string{"hello", "world"} {
		io.WriteString(c, line+"\n")
		got, err := r.ReadString('\n')
		if err != nil || got != strings.ToUpper(line)+"\n" {
			t.Fatalf("echo of %q = %q, %v", line, got, err)
		}
	}
	// The consumer stops writing: the agent must see the end of the stream,
	// and its last words must still reach the consumer.
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(r)
	if err != nil || string(rest) != "bye\n" {
		t.Fatalf("after half-close got %q, %v; want the agent's bye and EOF", rest, err)
	}
}

func TestRelayManyConcurrentConnections(t *testing.T) {
	addr, _ := startRelay(t, agentSocket(t))
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			msg := strings.Repeat("x", i*1000)
			io.WriteString(c, msg+"\n")
			c.(*net.TCPConn).CloseWrite()
			got, err := io.ReadAll(c)
			if err != nil || string(got) != strings.ToUpper(msg)+"\nbye\n" {
				errs <- fmt.Errorf("connection %d: got %d bytes, %v", i, len(got), err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestRelayClosesWhenTheAgentIsUnreachable(t *testing.T) {
	addr, _ := startRelay(t, filepath.Join(t.TempDir(), "missing.sock"))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(make([]byte, 1))
	if n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read = %d, %v; want the connection closed at once", n, err)
	}
}

func TestRelayShutdownCutsOpenConnections(t *testing.T) {
	addr, stop := startRelay(t, agentSocket(t))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "ping\n")
	r := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "PING\n" {
		t.Fatalf("echo = %q, %v", got, err)
	}
	stop() // waits for Run, which waits for every pipe
	if _, err := r.ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after shutdown: %v; want the connection closed", err)
	}
}

func TestConfigValidateNamesEveryProblem(t *testing.T) {
	err := Config{}.Validate()
	for _, want := range []string{"--listen", "--socket", "dial timeout", "logger"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v; want it to mention %q", err, want)
		}
	}
}

func TestImageFromBinary(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "hatch")
	os.WriteFile(bin, []byte("binary one"), 0o755)
	img, err := ImageFromBinary(bin)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(img.Context))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = string(b)
		if h.Name == "hatch" && h.Mode&0o111 == 0 {
			t.Errorf("hatch is not executable in the context: mode %o", h.Mode)
		}
	}
	if files["hatch"] != "binary one" || !strings.Contains(files["Dockerfile"], `ENTRYPOINT ["/hatch", "relay"]`) {
		t.Fatalf("context = %q", files)
	}
	if !strings.HasPrefix(img.Ref, ImageRepository+":") {
		t.Fatalf("ref = %q", img.Ref)
	}
	again, _ := ImageFromBinary(bin)
	os.WriteFile(bin, []byte("binary two"), 0o755)
	other, _ := ImageFromBinary(bin)
	if again.Ref != img.Ref || other.Ref == img.Ref {
		t.Fatalf("refs %q, %q, %q: want the same binary to give the same tag and another a new one", img.Ref, again.Ref, other.Ref)
	}
}
