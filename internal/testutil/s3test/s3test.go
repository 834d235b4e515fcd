// Package s3test runs a real S3 server for tests: SeaweedFS's `weed mini`,
// built by `make bin/weed` from tools/seaweedfs, on loopback ports in a
// temporary directory, with one access key and one bucket. Tests that need it
// are skipped when the binary is not built (a cold build takes about 9
// minutes, so CI runs them only when it is there); `make test-long` builds it
// first.
package s3test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Server is a running S3 server with a bucket.
type Server struct {
	// Endpoint is http://127.0.0.1:port.
	Endpoint  string
	AccessKey string
	SecretKey string
	Bucket    string
}

// Binary is where `make bin/weed` puts SeaweedFS: bin/weed at the
// repository's root.
func Binary() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "bin", "weed")
}

// Start starts a server for t, stopped when t ends, or skips t when the
// binary is not built.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary()
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no SeaweedFS binary at %s: build it with `make bin/weed` (about 9 minutes cold), or run `make test-long`", bin)
	}
	dir := t.TempDir()
	s := &Server{AccessKey: "hatchtest", SecretKey: "hatchtest-secret-key", Bucket: "backups"}
	config, _ := json.Marshal(map[string]any{"identities": []map[string]any{{
		"name":        "hatchtest",
		"credentials": []map[string]string{{"accessKey": s.AccessKey, "secretKey": s.SecretKey}},
		"actions":     []string{"Admin", "Read", "Write", "List", "Tagging"},
	}}})
	configFile := filepath.Join(dir, "s3.json")
	if err := os.WriteFile(configFile, config, 0o600); err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 8)
	s3Port := ports[0]
	s.Endpoint = "http://127.0.0.1:" + strconv.Itoa(s3Port)
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	args := []string{"mini",
		"-dir=" + data, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-s3.port=" + strconv.Itoa(s3Port), "-s3.port.grpc=" + strconv.Itoa(ports[1]),
		"-s3.port.iceberg=0", "-s3.port.lance=0", "-s3.config=" + configFile,
		"-s3.localSocket=" + filepath.Join(dir, "s3.sock"),
		"-master.port=" + strconv.Itoa(ports[2]), "-master.port.grpc=" + strconv.Itoa(ports[3]),
		"-volume.port=" + strconv.Itoa(ports[4]), "-volume.port.grpc=" + strconv.Itoa(ports[5]),
		"-filer.port=" + strconv.Itoa(ports[6]), "-filer.port.grpc=" + strconv.Itoa(ports[7]),
		"-filer.localSocket=" + filepath.Join(dir, "filer.sock"),
		"-webdav=false", "-admin.ui=false", "-master.telemetry=false",
		"-bucket=" + s.Bucket,
	}
	logFile, err := os.Create(filepath.Join(dir, "weed.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		logFile.Close()
		if t.Failed() {
			if out, err := os.ReadFile(logFile.Name()); err == nil {
				t.Logf("weed's log:\n%s", tail(out, 8<<10))
			}
		}
	})
	if err := s.waitReady(exited); err != nil {
		out, _ := os.ReadFile(logFile.Name())
		t.Fatalf("SeaweedFS did not serve S3 at %s: %v\n%s", s.Endpoint, err, tail(out, 8<<10))
	}
	return s
}

// waitReady waits until the bucket answers, for at most a minute.
func (s *Server) waitReady(exited <-chan error) error {
	client, err := minio.New(s.Endpoint[len("http://"):], &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, "")})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ok, err := client.BucketExists(ctx, s.Bucket)
		cancel()
		if err == nil && ok {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("bucket %s does not exist", s.Bucket)
		}
		select {
		case werr := <-exited:
			return fmt.Errorf("weed exited: %v", werr)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return err
		}
	}
}

// freePorts returns n loopback ports free a moment ago.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
