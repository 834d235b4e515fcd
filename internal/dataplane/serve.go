package dataplane

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/ingress"
	"github.com/hatchery/hatchery/internal/mesh"
)

// The parts meet here, each through the small interface its consumer
// declares.
var (
	_ ingress.Peers         = (*mesh.Node)(nil)
	_ mesh.LocalReplicas    = (*ingress.Ingress)(nil)
	_ mesh.HostCertificates = (*fileCerts)(nil)
	_ ingress.Listeners     = (*listenerSet)(nil)
)

// whyHandedOver is why a data plane that handed over stops.
const whyHandedOver = "handed over to a successor"

// DrainTimeout bounds how long a data plane that stops (told to, or handed
// over to a successor) lets its requests in flight finish.
const DrainTimeout = 30 * time.Second

// plane is a running data plane: the ingress and the mesh node, the
// control API that feeds them, and what was set, for a successor.
type plane struct {
	cfg    Config
	binary string
	log    *zap.Logger
	ls     *listenerSet
	certs  *fileCerts
	in     *ingress.Ingress
	node   *mesh.Node
	lock   *os.File
	ctl    *http.Server
	// meshAddr is where the mesh listens (the Config may ask for port 0).
	meshAddr string

	// done receives why the data plane stops: told to, or handed over.
	done chan string

	mu    sync.Mutex // guards state
	state State
}

// Serve runs the data plane of cfg until ctx ends, an agent tells it to stop
// (Client.Stop), or it handed its listeners to a successor. With takeOver
// it is that successor: it takes the listeners, the lock and the state of
// the data plane serving cfg.DataDir's socket, then tells it to go. binary
// is the hash of the running executable (BinaryHash). On its way out it
// stops accepting and lets requests in flight finish for DrainTimeout.
func Serve(ctx context.Context, cfg Config, binary string, takeOver bool, log *zap.Logger) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("data plane config: %w", err)
	}
	p := &plane{cfg: cfg, binary: binary, log: log, ls: &listenerSet{}, done: make(chan string, 1),
		certs: &fileCerts{dir: cfg.DataDir, hostID: cfg.HostID, log: log}}
	var predecessor *net.UnixConn
	if takeOver {
		conn, lock, state, err := receiveHandover(ctx, cfg.DataDir, p.ls)
		if err != nil {
			return err
		}
		predecessor, p.lock, p.state = conn, lock, state
		defer predecessor.Close()
	} else {
		lock, err := acquireLock(cfg.DataDir)
		if err != nil {
			return err
		}
		p.lock = lock
	}
	defer p.lock.Close() // a successor holds its own copy of the lock
	if err := p.start(); err != nil {
		p.ls.closeUnused()
		return err
	}
	certsCtx, stopCerts := context.WithCancel(context.Background())
	go p.certs.run(certsCtx)
	go p.deadman(certsCtx)
	defer stopCerts()
	if predecessor != nil {
		// Serving on the same sockets: the predecessor may stop accepting.
		if _, err := predecessor.Write([]byte{handoverReady}); err != nil {
			log.Warn("the predecessor did not hear that its successor serves; both serve until it stops", zap.Error(err))
		}
		log.Info("data plane took over")
	}
	log.Info("data plane running", zap.String("socket", SocketPath(cfg.DataDir)), zap.Int("pid", os.Getpid()),
		zap.String("ingress", addrString(p.in.HTTPAddr())), zap.String("admin", addrString(p.in.AdminAddr())),
		zap.String("mesh", p.cfg.MeshAddr))
	var why string
	select {
	case <-ctx.Done():
		why = "its context ended"
	case why = <-p.done:
	}
	log.Info("data plane stopping", zap.String("why", why))
	if why != whyHandedOver {
		_ = os.Remove(SocketPath(cfg.DataDir)) // no one serves it any more
	}
	return p.close(why == whyHandedOver)
}

// start starts the mesh node, the ingress with the state handed on (if
// any), and the control API, all on listeners from p.ls.
func (p *plane) start() error {
	meshLn, err := p.ls.Listen("tcp", p.cfg.MeshAddr, func() (net.Listener, error) { return net.Listen("tcp", p.cfg.MeshAddr) })
	if err != nil {
		return fmt.Errorf("mesh listen: %w", err)
	}
	if err := p.certs.reload(); err != nil {
		p.log.Info("no host certificate yet: the mesh starts once the agent has one", zap.Error(err))
	}
	p.meshAddr = meshLn.Addr().String()
	node, err := mesh.NewNode(meshConfig(p.log), p.cfg.HostID, p.certs, meshLn)
	if err != nil {
		_ = meshLn.Close()
		return err
	}
	in, err := ingress.New(p.cfg.ingressConfig(node, p.ls, p.log))
	if err != nil {
		_ = meshLn.Close()
		return err
	}
	p.in, p.node = in, node
	// The state handed on is in place before the first request is accepted:
	// a successor answering from an empty table would answer 503 to what
	// its predecessor served.
	p.restore()
	if err := node.Start(in); err != nil {
		return errors.Join(err, p.closeParts(context.Background()))
	}
	if err := in.Start(); err != nil {
		return errors.Join(err, p.closeParts(context.Background()))
	}
	ln, err := p.ls.Listen("unix", SocketPath(p.cfg.DataDir), func() (net.Listener, error) { return listenSocket(p.cfg.DataDir) })
	if err != nil {
		return errors.Join(fmt.Errorf("control socket: %w", err), p.closeParts(context.Background()))
	}
	p.ls.closeUnused()
	p.ctl = &http.Server{Handler: p.routes(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := p.ctl.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			p.log.Error("control API stopped", zap.Error(err))
		}
	}()
	return nil
}

// restore applies the state handed on by a predecessor, if any.
func (p *plane) restore() {
	s := p.state
	if s.Table != nil {
		if err := p.in.Update(*s.Table); err != nil {
			p.log.Warn("the table handed on is not served whole", zap.Error(err))
		}
	}
	p.in.SetProblem(s.Problem)
	p.node.SetPeers(s.Peers)
	for _, id := range s.Fenced {
		fence(p.in, id)
	}
}

// fence keeps a container out of the pool, as a drain does, without waiting
// for it: its drain ran in the predecessor.
func fence(in *ingress.Ingress, containerID string) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = in.Drain(ctx, containerID) // returns at once: ctx is done
}

// releaseWait bounds how long a data plane that handed over waits for the
// connections kept alive to close after their next response, before it
// closes those left (idle ones: see ingress.Ingress.Release).
const releaseWait = 10 * time.Second

// close stops the control API, then the mesh (peers' streams end before the
// ingress they reach) and the ingress, letting requests finish. One that
// handed over first stops accepting and lets its connections end on their
// own (releaseWait).
func (p *plane) close(handedOver bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), DrainTimeout)
	defer cancel()
	if err := p.ctl.Shutdown(ctx); err != nil {
		_ = p.ctl.Close() // an agent's call cut short: it retries
	}
	if handedOver {
		release, cancel := context.WithTimeout(ctx, releaseWait)
		p.in.Release(release)
		cancel()
	}
	return p.closeParts(ctx)
}

func (p *plane) closeParts(ctx context.Context) error {
	return errors.Join(p.node.Close(ctx), p.in.Close(ctx))
}

// update records what the agent set, for a successor.
func (p *plane) update(f func(*State)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(&p.state)
}

func (p *plane) snapshot() State {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.state
	s.Fenced = slices.Clone(s.Fenced)
	return s
}

// stop makes Serve return, once.
func (p *plane) stop(why string) {
	select {
	case p.done <- why:
	default:
	}
}

// BinaryHash is the SHA-256 of the executable at path: what tells an agent
// whether the data plane runs its binary.
func BinaryHash(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("hash the hatch binary: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash the hatch binary %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
