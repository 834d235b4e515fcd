// Package acme is the control plane's ACME client: the only one of the
// cluster. It keeps a certificate for every hostname whose routes are
// served with tls: auto, obtained when an apply lands such a route (never on
// demand from a TLS handshake), renewed once less than a third of its life
// is left, and handed to every host through the desired state (where its
// key is sealed like a secret value). HTTP-01 challenges reach every host's
// ingress the same way, and an order is answered only once every live host
// reports the token loaded.
//
// It is built on golang.org/x/crypto/acme rather than certmagic: the
// control plane obtains at apply time and stores in its own store, which is
// what x/crypto/acme's plain protocol calls fit; certmagic's on-demand
// issuance and storage model would have to be worked around.
package acme

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	xacme "golang.org/x/crypto/acme"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/fsutil"
	"github.com/hatchery/hatchery/internal/seal"
	"github.com/hatchery/hatchery/internal/store"
)

// Certificates is where the names to keep certificates for come from and
// where certificates and challenges go: the desired states of every host
// (*desired.States).
type Certificates interface {
	// TLSNames returns the hostnames of TLSAuto routes and the certificate
	// each has now (nil if none).
	TLSNames(ctx context.Context) (map[string]*contract.Certificate, error)
	PutCertificate(ctx context.Context, c contract.Certificate) error
	// SetChallenge adds a challenge (add), or removes it by its token.
	SetChallenge(ctx context.Context, c contract.Challenge, add bool) error
	// ChallengeWaiting names the live hosts that do not answer the token yet.
	ChallengeWaiting(ctx context.Context, token string) ([]string, error)
}

// EventRecorder appends to the event log.
type EventRecorder interface {
	AppendEvent(ctx context.Context, e store.Event) (int64, error)
}

// Config sets up a Manager.
type Config struct {
	// DirectoryURL is the CA's ACME directory.
	DirectoryURL string
	// Email is the account's contact.
	Email string
	// Challenge is the challenge type answered: ChallengeHTTP01 (the
	// default; the CA connects to port 80) or ChallengeTLSALPN01 (to 443).
	Challenge string
	// HTTPClient talks to the CA (nil: http.DefaultClient); a test CA's
	// root goes in its transport.
	HTTPClient *http.Client
	// AccountKeyFile keeps the account's key, sealed with Box.
	AccountKeyFile string
	// StateFile keeps each name's failures and next try across restarts,
	// so a restarted server does not hit a failing CA at once ("": kept in
	// memory only).
	StateFile    string
	Box          *seal.Box
	Certificates Certificates
	Events       EventRecorder
	Logger       *zap.Logger
	Now          func() time.Time
	// CheckEvery is how often names are checked without a kick (renewals;
	// default 1 minute).
	CheckEvery time.Duration
	// Changes, if set, returns a channel closed at the next change the
	// control plane records (store.Events.WatchEvents): an apply through
	// another server, whose Kick reaches only its own manager, is seen
	// within ChangeEvery rather than at the next CheckEvery.
	Changes func() <-chan struct{}
	// ChangeEvery bounds how often Changes leads to a check (default 2 s).
	ChangeEvery time.Duration
	// LoadedWait bounds the wait for every live host to report a
	// challenge loaded (default 60 s).
	LoadedWait time.Duration
	// MinBackoff and MaxBackoff bound the wait after a failed attempt for
	// a name, doubled at each failure (defaults 1 minute and 1 hour).
	MinBackoff, MaxBackoff time.Duration
}

// The challenge types the manager answers.
const (
	ChallengeHTTP01    = "http-01"
	ChallengeTLSALPN01 = "tls-alpn-01"
)

// Manager keeps the TLSAuto names' certificates. Run it; Kick it when
// routes may have changed.
type Manager struct {
	cfg  Config
	log  *zap.Logger
	kick chan struct{}

	mu     sync.Mutex
	client *xacme.Client
	state  map[string]*nameState // by hostname
}

// nameState is a name's last attempt, for back-off and status.
type nameState struct {
	Failures  int       `json:"failures"`
	NextTry   time.Time `json:"next_try"`
	LastError string    `json:"last_error,omitempty"`
}

// Status is a name's certificate as the manager sees it.
type Status struct {
	Host      string
	Issuer    string
	NotAfter  time.Time
	LastError string
}

// New checks the configuration; nothing runs until Start.
func New(cfg Config) (*Manager, error) {
	switch {
	case cfg.DirectoryURL == "":
		return nil, errors.New("acme: no CA directory URL (--acme-ca)")
	case cfg.Email == "" || !strings.Contains(cfg.Email, "@"):
		return nil, fmt.Errorf("acme: %q is not a contact address (--acme-email ops@example.com)", cfg.Email)
	case cfg.AccountKeyFile == "" || cfg.Box == nil || cfg.Certificates == nil || cfg.Events == nil || cfg.Logger == nil:
		return nil, errors.New("acme: AccountKeyFile, Box, Certificates, Events and Logger must be set")
	}
	switch cfg.Challenge {
	case "":
		cfg.Challenge = ChallengeHTTP01
	case ChallengeHTTP01, ChallengeTLSALPN01:
	default:
		return nil, fmt.Errorf("acme: unknown challenge type %q: %s or %s", cfg.Challenge, ChallengeHTTP01, ChallengeTLSALPN01)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = http.DefaultClient
	}
	if cfg.CheckEvery <= 0 {
		cfg.CheckEvery = time.Minute
	}
	if cfg.ChangeEvery <= 0 {
		cfg.ChangeEvery = 2 * time.Second
	}
	if cfg.LoadedWait <= 0 {
		cfg.LoadedWait = time.Minute
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = time.Minute
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(time.Hour, cfg.MinBackoff)
	}
	m := &Manager{cfg: cfg, log: cfg.Logger.Named("acme"), kick: make(chan struct{}, 1), state: map[string]*nameState{}}
	if cfg.StateFile != "" {
		data, err := os.ReadFile(cfg.StateFile)
		switch {
		case err == nil:
			if err := json.Unmarshal(data, &m.state); err != nil {
				return nil, fmt.Errorf("acme: state %s: %w", cfg.StateFile, err)
			}
		case !errors.Is(err, os.ErrNotExist):
			return nil, fmt.Errorf("acme: state: %w", err)
		}
	}
	return m, nil
}

// saveState keeps the names' back-off. The caller holds mu.
func (m *Manager) saveState() {
	if m.cfg.StateFile == "" {
		return
	}
	data, err := json.Marshal(m.state)
	if err == nil {
		err = fsutil.WriteFileAtomic(m.cfg.StateFile, data, 0o600)
	}
	if err != nil {
		m.log.Warn("ACME back-off not kept", zap.Error(err))
	}
}

// Kick makes the manager check the names now (an apply landed). A nil
// Manager (no ACME CA) ignores it.
func (m *Manager) Kick() {
	if m == nil {
		return
	}
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Run checks the names at once, then every CheckEvery and at each Kick,
// until ctx ends (an order in flight is abandoned). The server runs it
// among the background loops, so one server of the control plane at a time
// is the cluster's ACME client.
func (m *Manager) Run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	var changed <-chan struct{} // nil without Changes: never ready
	if m.cfg.Changes != nil {
		changed = m.cfg.Changes()
	}
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.kick:
		case <-t.C:
		case <-changed:
			changed = m.cfg.Changes()
			if wait := time.Until(last.Add(m.cfg.ChangeEvery)); wait > 0 {
				t.Reset(wait) // sooner than CheckEvery: the change is looked at then
				continue
			}
		}
		m.CheckOnce(ctx)
		last = time.Now()
		t.Reset(m.cfg.CheckEvery)
	}
}

// CheckOnce obtains or renews every name that needs it and whose back-off
// has passed, one at a time (the CA's rate limits count orders).
func (m *Manager) CheckOnce(ctx context.Context) {
	names, err := m.cfg.Certificates.TLSNames(ctx)
	if err != nil {
		m.log.Warn("cannot list the names to certify", zap.Error(err))
		return
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		if ctx.Err() != nil {
			return
		}
		cur := names[name]
		if !m.due(name, cur) {
			continue
		}
		err := m.obtain(ctx, name)
		m.record(ctx, name, cur, err)
	}
}

// due says whether name needs a certificate now: none, one not parsing,
// or one with less than a third of its life left; and not in back-off.
func (m *Manager) due(name string, cur *contract.Certificate) bool {
	now := m.cfg.Now()
	m.mu.Lock()
	st := m.state[name]
	m.mu.Unlock()
	if st != nil && now.Before(st.NextTry) {
		return false
	}
	if cur == nil {
		return true
	}
	leaf, err := leafOf(cur.Chain)
	if err != nil {
		return true
	}
	life := leaf.NotAfter.Sub(leaf.NotBefore)
	return leaf.NotAfter.Sub(now) < life/3
}

// record keeps an attempt's outcome: its event, and the back-off after a
// failure (doubling from MinBackoff to MaxBackoff).
func (m *Manager) record(ctx context.Context, name string, prev *contract.Certificate, err error) {
	m.mu.Lock()
	st := m.state[name]
	if st == nil {
		st = &nameState{}
		m.state[name] = st
	}
	ev := store.Event{Time: m.cfg.Now(), Resource: "route/" + name}
	if err != nil {
		st.Failures++
		wait := m.cfg.MinBackoff << min(st.Failures-1, 16)
		if wait > m.cfg.MaxBackoff || wait <= 0 {
			wait = m.cfg.MaxBackoff
		}
		st.NextTry = m.cfg.Now().Add(wait)
		st.LastError = err.Error()
		ev.Type = store.EventCertificateFailed
		ev.Message = fmt.Sprintf("certificate for %s: %v (next try in %s)", name, err, wait.Round(time.Second))
		if prev != nil {
			ev.Message += "; the current certificate keeps serving"
		}
		m.log.Warn("certificate not obtained", zap.String("name", name), zap.Error(err), zap.Duration("retry_in", wait))
	} else {
		st.Failures, st.NextTry, st.LastError = 0, time.Time{}, ""
		ev.Type = store.EventCertificateIssued
		ev.Message = "certificate issued for " + name
		if prev != nil {
			ev.Type, ev.Message = store.EventCertificateRenewed, "certificate renewed for "+name
		}
		m.log.Info(ev.Message, zap.String("name", name))
	}
	m.saveState()
	m.mu.Unlock()
	if _, err := m.cfg.Events.AppendEvent(context.WithoutCancel(ctx), ev); err != nil {
		m.log.Warn("event not recorded", zap.Error(err))
	}
}

// Statuses returns each name's certificate and last error.
func (m *Manager) Statuses(ctx context.Context) ([]Status, error) {
	names, err := m.cfg.Certificates.TLSNames(ctx)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Status
	for _, name := range slices.Sorted(maps.Keys(names)) {
		s := Status{Host: name}
		if c := names[name]; c != nil {
			if leaf, err := leafOf(c.Chain); err == nil {
				s.Issuer, s.NotAfter = leaf.Issuer.CommonName, leaf.NotAfter
			}
		}
		if st := m.state[name]; st != nil {
			s.LastError = st.LastError
		}
		out = append(out, s)
	}
	return out, nil
}

// LastErrors returns, by hostname, why its last attempt failed (only the
// names whose last attempt failed). A nil Manager has none.
func (m *Manager) LastErrors() map[string]string {
	out := map[string]string{}
	if m == nil {
		return out
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, st := range m.state {
		if st.LastError != "" {
			out[name] = st.LastError
		}
	}
	return out
}

// obtain runs one order for name: HTTP-01 through every host's ingress.
func (m *Manager) obtain(ctx context.Context, name string) error {
	client, err := m.account(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	order, err := client.AuthorizeOrder(ctx, xacme.DomainIDs(name))
	if err != nil {
		return fmt.Errorf("new order: %w", err)
	}
	for _, u := range order.AuthzURLs {
		if err := m.authorize(ctx, client, u); err != nil {
			return err
		}
	}
	if order, err = client.WaitOrder(ctx, order.URI); err != nil {
		return fmt.Errorf("order: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: []string{name}}, key)
	if err != nil {
		return err
	}
	ders, _, err := client.CreateOrderCert(ctx, order.FinalizeURL, csr, true)
	if err != nil {
		return fmt.Errorf("finalize: %w", err)
	}
	var chain []byte
	for _, der := range ders {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	return m.cfg.Certificates.PutCertificate(ctx, contract.Certificate{Host: name, Chain: string(chain), Key: contract.SecretValue(keyPEM)})
}

// authorize answers one authorization with HTTP-01: the key authorization
// goes to every host, and the CA is told to validate once every live host
// reports it loaded. The challenge is withdrawn afterwards either way.
func (m *Manager) authorize(ctx context.Context, client *xacme.Client, url string) error {
	z, err := client.GetAuthorization(ctx, url)
	if err != nil {
		return fmt.Errorf("authorization: %w", err)
	}
	if z.Status == xacme.StatusValid {
		return nil
	}
	var chal *xacme.Challenge
	for _, c := range z.Challenges {
		if c.Type == m.cfg.Challenge {
			chal = c
		}
	}
	if chal == nil {
		return fmt.Errorf("the CA offers no %s challenge for %s", m.cfg.Challenge, z.Identifier.Value)
	}
	answer, err := m.answer(client, chal, z.Identifier.Value)
	if err != nil {
		return err
	}
	if err := m.cfg.Certificates.SetChallenge(ctx, answer, true); err != nil {
		return fmt.Errorf("hand the challenge to the hosts: %w", err)
	}
	defer func() {
		if err := m.cfg.Certificates.SetChallenge(context.WithoutCancel(ctx), contract.Challenge{Token: chal.Token}, false); err != nil {
			m.log.Warn("challenge not withdrawn", zap.Error(err))
		}
	}()
	if err := m.waitLoaded(ctx, chal.Token); err != nil {
		return err
	}
	if _, err := client.Accept(ctx, chal); err != nil {
		return fmt.Errorf("accept the challenge: %w", err)
	}
	if _, err := client.WaitAuthorization(ctx, z.URI); err != nil {
		return fmt.Errorf("validation of %s: %w", z.Identifier.Value, err)
	}
	return nil
}

// answer is what the hosts present for a challenge: the key authorization
// for HTTP-01, the self-signed certificate for TLS-ALPN-01.
func (m *Manager) answer(client *xacme.Client, chal *xacme.Challenge, name string) (contract.Challenge, error) {
	if chal.Type == ChallengeHTTP01 {
		keyAuth, err := client.HTTP01ChallengeResponse(chal.Token)
		return contract.Challenge{Token: chal.Token, KeyAuth: keyAuth}, err
	}
	cert, err := client.TLSALPN01ChallengeCert(chal.Token, name)
	if err != nil {
		return contract.Challenge{}, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return contract.Challenge{}, err
	}
	return contract.Challenge{Token: chal.Token, Host: name,
		ALPNCert: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})),
		ALPNKey:  contract.SecretValue(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))}, nil
}

// waitLoaded waits until every live host reports the token loaded.
func (m *Manager) waitLoaded(ctx context.Context, token string) error {
	deadline := time.Now().Add(m.cfg.LoadedWait)
	for {
		waiting, err := m.cfg.Certificates.ChallengeWaiting(ctx, token)
		if err != nil {
			return err
		}
		if len(waiting) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hosts %s did not load the challenge within %s", strings.Join(waiting, ", "), m.cfg.LoadedWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// account returns the client with the cluster's one account, made (and
// its key kept sealed) at the first use.
func (m *Manager) account(ctx context.Context) (*xacme.Client, error) {
	m.mu.Lock()
	c := m.client
	m.mu.Unlock()
	if c != nil {
		return c, nil
	}
	key, err := m.accountKey()
	if err != nil {
		return nil, err
	}
	c = &xacme.Client{Key: key, DirectoryURL: m.cfg.DirectoryURL, HTTPClient: m.cfg.HTTPClient, UserAgent: "hatch"}
	_, err = c.Register(ctx, &xacme.Account{Contact: []string{"mailto:" + m.cfg.Email}}, xacme.AcceptTOS)
	if err != nil && !errors.Is(err, xacme.ErrAccountAlreadyExists) {
		return nil, fmt.Errorf("ACME account at %s: %w", m.cfg.DirectoryURL, err)
	}
	m.mu.Lock()
	m.client = c
	m.mu.Unlock()
	return c, nil
}

// accountKey loads the account key, or makes and keeps one.
func (m *Manager) accountKey() (crypto.Signer, error) {
	sealed, err := os.ReadFile(m.cfg.AccountKeyFile)
	if err == nil {
		der, err := m.cfg.Box.Open(string(sealed))
		if err != nil {
			return nil, fmt.Errorf("ACME account key %s: %w", m.cfg.AccountKeyFile, err)
		}
		return x509.ParseECPrivateKey(der)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("ACME account key: %w", err)
	}
	return WriteAccountKey(m.cfg.AccountKeyFile, m.cfg.Box)
}

// WriteAccountKey makes an ACME account key and keeps it at path, sealed
// with box. `hatch server init` writes it with the other shared files, so
// every server of a control plane orders as the one account.
func WriteAccountKey(path string, box *seal.Box) (crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	if err := fsutil.WriteFileAtomic(path, []byte(box.Seal(der)), 0o600); err != nil {
		return nil, fmt.Errorf("keep the ACME account key: %w", err)
	}
	return key, nil
}

func leafOf(chain string) (*x509.Certificate, error) {
	block, _ := pem.Decode([]byte(chain))
	if block == nil {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}
