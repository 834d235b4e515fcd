package mesh

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/pki"
)

// Certificates gives this host's current certificate; it is asked at every
// handshake, so that a renewed certificate is used from the next connection
// on without a restart.
type Certificates interface {
	HostCertificate() (*tls.Certificate, error)
}

// Credentials are this host's identity on the mesh.
type Credentials struct {
	// HostID is this host's ID, as its certificate names it.
	HostID string
	// HostCA is the pool of the host CA: the only roots the mesh trusts.
	HostCA *x509.CertPool
	// Certificate is this host's certificate and key.
	Certificate Certificates
}

func (c Credentials) validate() error {
	if c.HostID == "" || c.HostCA == nil || c.Certificate == nil {
		return errors.New("mesh: credentials need the host ID, the host CA and the host certificate")
	}
	return nil
}

// Workload names an egg of a project, and what a stream to it carries: the
// target of a stream.
type Workload struct {
	Namespace, Project, Egg string
	// Port is the port inside a replica that a TCP stream reaches (a
	// published port's or a relay's connection). Zero marks an HTTP stream:
	// the peer serves it as an HTTP connection, each request of it proxied
	// to one of its own replicas, so that a replica draining there gets no
	// new request even on a connection kept alive.
	Port int
}

// ParseWorkload reads a workload ID, namespace/project/egg, for a stream
// to port (zero: an HTTP stream).
func ParseWorkload(id string, port int) (Workload, error) {
	parts := strings.Split(id, "/")
	if len(parts) != 3 {
		return Workload{}, fmt.Errorf("workload %q: want namespace/project/egg", id)
	}
	w := Workload{Namespace: parts[0], Project: parts[1], Egg: parts[2], Port: port}
	return w, w.validate()
}

// ID is the workload ID, namespace/project/egg, as desired states write it.
func (w Workload) ID() string { return contract.WorkloadID(w.Namespace, w.Project, w.Egg) }

// portName names the stream's port in messages: "HTTP" or "port <n>".
func (w Workload) portName() string {
	if w.Port == 0 {
		return "HTTP"
	}
	return "port " + strconv.Itoa(w.Port)
}

func (w Workload) validate() error {
	for _, part := range []string{w.Namespace, w.Project, w.Egg} {
		if part == "" || strings.ContainsAny(part, "/?#%") {
			return fmt.Errorf("workload %q: want namespace/project/egg, each part non-empty without '/'", w.ID())
		}
	}
	if w.Port < 0 || w.Port > 65535 {
		return fmt.Errorf("workload %q: port %d out of range", w.ID(), w.Port)
	}
	return nil
}

// peerSet is the valid host set, as the last desired state gave it.
type peerSet struct {
	mu    sync.RWMutex // guards peers
	peers map[string]contract.Peer
}

// replace installs a new set and returns the host IDs that left it.
func (s *peerSet) replace(peers []contract.Peer) (gone []string) {
	next := make(map[string]contract.Peer, len(peers))
	for _, p := range peers {
		next[p.HostID] = p
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.peers {
		if _, ok := next[id]; !ok {
			gone = append(gone, id)
		}
	}
	s.peers = next
	return gone
}

func (s *peerSet) get(id string) (contract.Peer, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.peers[id]
	return p, ok
}

// verifyPeer checks a handshake's peer: a chain to the host CA for usage,
// a host certificate, and a host in the valid set. It returns the host ID.
func verifyPeer(certs []*x509.Certificate, roots *x509.CertPool, usage x509.ExtKeyUsage, valid *peerSet) (string, error) {
	if len(certs) == 0 {
		return "", errors.New("mesh: the peer presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return "", fmt.Errorf("mesh: peer certificate: %w", err)
	}
	id, err := pki.HostIDFromCert(certs[0])
	if err != nil {
		return "", fmt.Errorf("mesh: %w", err)
	}
	if _, ok := valid.get(id); !ok {
		return "", fmt.Errorf("mesh: host %s is not in the valid host set", id)
	}
	return id, nil
}
