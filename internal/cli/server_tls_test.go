package cli

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/agent"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/pki"
)

// syncBuffer is a bytes.Buffer safe to write from the server's goroutine
// while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runningServer is `hatch server` run in-process.
type runningServer struct {
	url            string
	stdout, stderr *syncBuffer
	stop           func() int // stops it and returns its exit code
}

// startServer runs `hatch server` with args until the test ends (or stop).
func startServer(t *testing.T, args ...string) *runningServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &runningServer{stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, append([]string{"server", "--listen", "127.0.0.1:0"}, args...), s.stdout, s.stderr)
	}()
	var once sync.Once
	code := 0
	s.stop = func() int {
		once.Do(func() { cancel(); code = <-done })
		return code
	}
	t.Cleanup(func() { s.stop() })
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(s.stdout.String(), "hatch server listening on") {
		select {
		case code := <-done:
			t.Fatalf("hatch server exited with %d: %s%s", code, s.stdout, s.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("hatch server did not start: %s%s", s.stdout, s.stderr)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, line := range strings.Split(s.stdout.String(), "\n") {
		if url, ok := strings.CutPrefix(line, "server URL on this machine: "); ok {
			s.url = url
		}
	}
	return s
}

// isolate gives the test its own working directory and user config dir, and
// clears the HATCH_ variables, so that the CLI finds only what the test made.
func isolate(t *testing.T) (configDir string) {
	t.Helper()
	configDir = t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", configDir)
	t.Setenv(client.EnvServer, "")
	t.Setenv(client.EnvToken, "")
	t.Chdir(t.TempDir())
	return configDir
}

func TestHatchServerServesHTTPSAndTheCLIOnItsMachineNeedsNoFlags(t *testing.T) {
	configDir := isolate(t)
	dataDir := t.TempDir()
	srv := startServer(t, "--data-dir", dataDir)
	if !strings.HasPrefix(srv.url, "https://127.0.0.1:") {
		t.Fatalf("server URL %q, want https on loopback", srv.url)
	}
	adminToken := strings.TrimSpace(readFile(t, filepath.Join(dataDir, "admin-token")))
	if !strings.Contains(srv.stdout.String(), adminToken) {
		t.Fatal("the first start did not print the admin token")
	}
	cfg, ok, err := client.Load(client.UserConfigPath(configDir))
	if err != nil || !ok || cfg.Server != srv.url || cfg.Token != adminToken {
		t.Fatalf("CLI config %+v, %v, %v; want the server's URL and admin token", cfg, ok, err)
	}
	if !strings.Contains(srv.stdout.String(), client.UserConfigPath(configDir)) {
		t.Error("hatch server did not say where it wrote the CLI config")
	}

	code, joinToken, errOut := run(t, "token", "create", "--join", "--ttl", "10m", "--uses", "2")
	joinToken = strings.TrimSpace(joinToken)
	tok, err := pki.ParseToken(joinToken)
	if code != 0 || err != nil || tok.Kind != pki.KindJoin {
		t.Fatalf("hatch token create --join = %d %q %s", code, joinToken, errOut)
	}
	if adminTok, _ := pki.ParseToken(adminToken); tok.Fingerprint != adminTok.Fingerprint {
		t.Fatal("the join token carries another fingerprint than the admin token")
	}

	// An agent joins with it, verifying the server against the fingerprint.
	joined, err := agent.Join(t.Context(), srv.url, joinToken, "alpha", nil)
	if err != nil || len(joined.CAPEM) == 0 {
		t.Fatalf("agent join: %v", err)
	}
	id := joined.Identity
	code, out, errOut := run(t, "hosts")
	if code != 0 || !strings.Contains(out, "alpha") || !strings.Contains(out, id.HostID) {
		t.Fatalf("hatch hosts = %d %q %s", code, out, errOut)
	}
	code, out, _ = run(t, "token", "list")
	if code != 0 || !strings.Contains(out, tokenListLine(joinToken)) || strings.Contains(out, tok.Secret) {
		t.Fatalf("hatch token list = %d %q; want the token's ID with 1/2 uses, never its secret", code, out)
	}
	code, out, errOut = run(t, "token", "revoke", joinToken)
	if code != 0 || !strings.Contains(out, "revoked") {
		t.Fatalf("hatch token revoke = %d %q %s", code, out, errOut)
	}
	if _, err := agent.Join(t.Context(), srv.url, joinToken, "beta", nil); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("join with a revoked token: %v, want refused as revoked", err)
	}

	// Removing the host refuses its token at its next request.
	cp, err := agent.NewHTTPClient(id)
	if err != nil {
		t.Fatal(err)
	}
	report := contract.StatusReport{HostID: id.HostID, Time: time.Now()}
	if err := cp.ReportStatus(t.Context(), report); err != nil {
		t.Fatalf("a joined host's report: %v", err)
	}
	code, out, errOut = run(t, "hosts", "remove", "alpha")
	if code != 0 || !strings.Contains(out, "removed") {
		t.Fatalf("hatch hosts remove = %d %q %s", code, out, errOut)
	}
	var apiErr *agent.APIError
	if err := cp.ReportStatus(t.Context(), report); !errors.As(err, &apiErr) || apiErr.StatusCode != 401 {
		t.Fatalf("a removed host's report: %v, want 401", err)
	}
	code, _, errOut = run(t, "hosts", "remove", "gamma")
	if code != 1 || !strings.Contains(errOut, "gamma") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("hatch hosts remove gamma = %d %q, want one line naming it", code, errOut)
	}

	if code := srv.stop(); code != 0 {
		t.Fatalf("hatch server exited %d: %s", code, srv.stderr)
	}
	for _, secret := range []string{adminToken, joinToken, id.Token, tok.Secret} {
		if strings.Contains(srv.stderr.String(), secret) {
			t.Fatalf("a token appears in the server's log:\n%s", srv.stderr)
		}
	}

	// A restart prints no token and leaves the CLI config as it was.
	again := startServer(t, "--data-dir", dataDir)
	if strings.Contains(again.stdout.String(), adminToken) || strings.Contains(again.stdout.String(), "admin token") {
		t.Fatalf("a restart printed the admin token: %s", again.stdout)
	}
	if code, _, errOut := run(t, "hosts"); code != 0 {
		t.Fatalf("hatch hosts after a restart = %d %s", code, errOut)
	}
}

// tokenListLine is how `hatch token list` shows a join token used once of two.
func tokenListLine(joinToken string) string {
	id, _ := joinTokenID(joinToken)
	return id + "  active  1/2"
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAnotherServersCLIConfigIsLeftAlone(t *testing.T) {
	configDir := isolate(t)
	path := client.UserConfigPath(configDir)
	theirs := client.Config{Server: "https://cp.example.com:7700", Token: pki.NewToken(pki.KindAdmin, strings.Repeat("ab", 32)).String()}
	if err := client.Save(path, theirs); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, "--data-dir", t.TempDir())
	if got, _, _ := client.Load(path); got != theirs {
		t.Fatalf("the CLI config of another server was replaced by %+v", got)
	}
	if !strings.Contains(srv.stdout.String(), "names another server") {
		t.Fatalf("hatch server did not say it left the config alone: %s", srv.stdout)
	}
}

func TestInsecureHTTPServesPlainHTTPOnLoopback(t *testing.T) {
	isolate(t)
	srv := startServer(t, "--data-dir", t.TempDir(), "--insecure-http")
	if !strings.HasPrefix(srv.url, "http://127.0.0.1:") {
		t.Fatalf("server URL %q, want http on loopback", srv.url)
	}
	if code, out, errOut := run(t, "token", "list"); code != 0 || !strings.Contains(out, "no join tokens") {
		t.Fatalf("hatch token list over plain HTTP on loopback = %d %q %s", code, out, errOut)
	}
	if strings.Contains(srv.stderr.String(), "non-loopback") {
		t.Fatal("a loopback server warned about plain HTTP on a non-loopback address")
	}
}

func TestAnOperatorsCertificateIsServedAndPinned(t *testing.T) {
	isolate(t)
	dataDir := t.TempDir()
	first := startServer(t, "--data-dir", dataDir)
	first.stop()
	caToken := strings.TrimSpace(readFile(t, filepath.Join(dataDir, "admin-token")))

	certFile, keyFile, fingerprint := operatorCertificate(t)
	srv := startServer(t, "--data-dir", dataDir, "--tls-cert", certFile, "--tls-key", keyFile)
	token := strings.TrimSpace(readFile(t, filepath.Join(dataDir, "admin-token")))
	tok, _ := pki.ParseToken(token)
	if tok.Fingerprint != fingerprint || !sameSecret(token, caToken) {
		t.Fatalf("admin token after the switch pins %s, want the operator's %s with the same secret", tok.Fingerprint, fingerprint)
	}
	if !strings.Contains(srv.stdout.String(), fingerprint) {
		t.Fatal("hatch server did not print the fingerprint it serves")
	}
	code, joinToken, errOut := run(t, "token", "create", "--join")
	if code != 0 {
		t.Fatalf("hatch token create --join = %d %s", code, errOut)
	}
	if jt, _ := pki.ParseToken(strings.TrimSpace(joinToken)); jt.Fingerprint != fingerprint {
		t.Fatal("the join token does not pin the operator's certificate")
	}
	// A token pinning the old CA does not trust the operator's certificate.
	code, _, errOut = run(t, "hosts", "--server", srv.url, "--token", caToken)
	if code != 1 || !strings.Contains(errOut, "not the server the token was made by") {
		t.Fatalf("hatch hosts with a token of the old CA = %d %q", code, errOut)
	}
}

// operatorCertificate writes a self-signed certificate for 127.0.0.1 and
// its key, as an operator's own would be, and returns its fingerprint.
func operatorCertificate(t *testing.T) (certFile, keyFile, fingerprint string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7),
		Subject:      pkix.Name{CommonName: "cp.example.com"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"cp.example.com"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, pki.Fingerprint(der)
}

func TestServerTransportFlagsThatCannotWorkAreRefused(t *testing.T) {
	isolate(t)
	certFile, keyFile, _ := operatorCertificate(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", certFile}, "go together"},
		{[]string{"--tls-key", keyFile}, "go together"},
		{[]string{"--tls-cert", certFile, "--tls-key", keyFile, "--insecure-http"}, "cannot be used with --tls-cert"},
		{[]string{"--tls-cert", keyFile, "--tls-key", certFile}, "--tls-cert/--tls-key"},
		{[]string{"--auth-failure-burst", "0"}, "auth failure burst"},
		{[]string{"--request-timeout", "0s"}, "--request-timeout: must be positive"},
	} {
		args := append([]string{"server", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir()}, tc.args...)
		code, _, errOut := run(t, args...)
		if code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("hatch %v = %d %q, want an error mentioning %q", tc.args, code, errOut, tc.want)
		}
	}
}

func TestANamedAdminTokenWorksIsListedShowsInEventsAndIsRevoked(t *testing.T) {
	isolate(t)
	srv := startServer(t, "--data-dir", t.TempDir())
	code, alice, errOut := run(t, "token", "create", "--admin", "--name", "alice")
	alice = strings.TrimSpace(alice)
	if tok, err := pki.ParseToken(alice); code != 0 || err != nil || tok.Kind != pki.KindAdmin {
		t.Fatalf("hatch token create --admin --name alice = %d %q %s", code, alice, errOut)
	}
	// alice makes a join token with her own token; the event log says so.
	if code, _, errOut := run(t, "token", "create", "--join", "--token", alice); code != 0 {
		t.Fatalf("a join token made with alice's token: %d %s", code, errOut)
	}
	if code, out, errOut := run(t, "token", "create", "--admin", "--name", "bob", "--token", alice); code != 0 || out == "" {
		t.Fatalf("bob made by alice: %d %s", code, errOut)
	}
	code, out, _ := run(t, "events")
	if code != 0 || !strings.Contains(out, `admin token "alice" created (by admin)`) || !strings.Contains(out, `"bob" created (by alice)`) {
		t.Fatalf("hatch events = %d %q; want alice made by admin and bob by alice", code, out)
	}
	code, out, _ = run(t, "token", "list")
	if code != 0 || !strings.Contains(out, "alice") || !strings.Contains(out, "bob") || strings.Contains(out, alice) {
		t.Fatalf("hatch token list = %d %q; want alice and bob, never a token", code, out)
	}
	if code, out, errOut := run(t, "token", "revoke", "--admin", "alice"); code != 0 || !strings.Contains(out, "revoked") {
		t.Fatalf("hatch token revoke --admin alice = %d %q %s", code, out, errOut)
	}
	if code, _, errOut := run(t, "hosts", "--token", alice); code == 0 || !strings.Contains(errOut, `"alice" was revoked`) {
		t.Fatalf("hatch hosts with alice's revoked token = %d %q, want refused", code, errOut)
	}
	if code, _, errOut := run(t, "token", "revoke", "--admin", "admin"); code == 0 || !strings.Contains(errOut, "cannot be revoked") {
		t.Fatalf("revoking the first admin token = %d %q, want refused", code, errOut)
	}
	if code, _, errOut := run(t, "token", "create", "--admin"); code == 0 || !strings.Contains(errOut, "--name") {
		t.Fatalf("--admin without --name = %d %q, want told to give --name", code, errOut)
	}
	if code := srv.stop(); code != 0 {
		t.Fatalf("hatch server exited %d: %s", code, srv.stderr)
	}
}

// runRefused runs a command that should be refused at once; if it starts a
// server anyway, that is stopped after a while (and the test fails on its
// exit code), so the test never hangs.
func runRefused(t *testing.T, args ...string) (code int, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code = Run(ctx, args, &out, &errOut)
	return code, errOut.String()
}

func TestInsecureHTTPIsRefusedOffLoopbackBeforeAnyStateIsMade(t *testing.T) {
	isolate(t)
	for _, listen := range []string{":0", "0.0.0.0:0", "[::]:0", "192.0.2.10:0", "[2001:db8::1]:0"} {
		dataDir := filepath.Join(t.TempDir(), "data")
		code, errOut := runRefused(t, "server", "--data-dir", dataDir, "--insecure-http", "--listen", listen)
		if code != 1 {
			t.Errorf("--insecure-http --listen %s: exit %d, want 1; stderr %s", listen, code, errOut)
		}
		for _, want := range []string{"--insecure-http", listen, "loopback", "--tls-cert/--tls-key"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("--insecure-http --listen %s: the error lacks %q: %s", listen, want, errOut)
			}
		}
		if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("--insecure-http --listen %s: the data dir was made (%v) before the refusal", listen, err)
		}
	}
}

// checkPrivate fails unless dir holds the files named, and it and
// everything under it are its owner's only: directories 0700, files 0600
// (or stricter).
func checkPrivate(t *testing.T, dir string, files ...string) {
	t.Helper()
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s was not made: %v", f, err)
		}
	}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch mode := fi.Mode(); {
		case mode.IsDir() && mode.Perm() != 0o700:
			t.Errorf("directory %s is %04o, want 0700", path, mode.Perm())
		case mode.IsRegular() && mode.Perm()&0o177 != 0:
			t.Errorf("file %s is %04o, want 0600", path, mode.Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestServerDataDirIsItsOwnersOnly(t *testing.T) {
	isolate(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	srv := startServer(t, "--data-dir", dataDir)
	if code, _, errOut := run(t, "token", "create", "--join"); code != 0 { // a write: the WAL is there
		t.Fatalf("hatch token create --join = %d %s", code, errOut)
	}
	checkPrivate(t, dataDir, "hatch.db", "hatch.db-wal", "hatch.db-shm", "admin-token", "seal.key", "tls/ca.pem", "tls/ca-key.pem")
	srv.stop()

	// A data dir an older version left open (0755, files 0644) is tightened.
	for p, mode := range map[string]os.FileMode{dataDir: 0o755, filepath.Join(dataDir, "hatch.db"): 0o644} {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	startServer(t, "--data-dir", dataDir)
	checkPrivate(t, dataDir)
}

func TestServerRefusesAnOpenDataDirThatIsNotHatcherys(t *testing.T) {
	isolate(t)
	dataDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dataDir, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	code, errOut := runRefused(t, "server", "--listen", "127.0.0.1:0", "--data-dir", dataDir)
	if code != 1 || !strings.Contains(errOut, "--data-dir") || !strings.Contains(errOut, dataDir) || !strings.Contains(errOut, "chmod 700") {
		t.Fatalf("hatch server in an open directory of someone else's = %d %q; want a refusal naming it and the fix", code, errOut)
	}
	if fi, err := os.Stat(dataDir); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("the directory's mode was changed: %v %v", fi.Mode(), err)
	}
	if entries, _ := os.ReadDir(dataDir); len(entries) != 1 {
		t.Fatalf("files were made in a refused directory: %v", entries)
	}
}
