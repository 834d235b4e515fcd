package agent

import (
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/pki"
)

// trustWatch follows whether the control plane's certificate verifies
// against the CA this host pinned at its join. One that does not is a
// configuration error (the server's CA changed, or another server answers
// at its address), not an outage: the agent never sends its token to it, so
// the server sees only silence, and the host must say it loudly itself.
type trustWatch struct {
	mu      sync.Mutex // guards the fields below
	problem string     // the reason /healthz gives; "" while trusted
	logged  time.Time  // when the problem was last logged
}

// untrustedServer reports whether err is a TLS verification failure of the
// control plane: a certificate not from the pinned CA, or one from it that
// does not cover the server's name or is not valid now.
func untrustedServer(err error) bool {
	var (
		hostname  x509.HostnameError
		authority x509.UnknownAuthorityError
		invalid   x509.CertificateInvalidError
	)
	return errors.Is(err, pki.ErrFingerprintMismatch) || errors.As(err, &hostname) ||
		errors.As(err, &authority) || errors.As(err, &invalid)
}

// checkTrust looks at the outcome of a call to the control plane and
// reports whether it failed because the server cannot be verified. Then the
// host's /healthz answers 503 with the reason, and the error is logged at
// once and again every UntrustedLogInterval while it lasts (neither a flood
// nor silence). An answer of the server (nil, or an error it sent) clears
// it; other failures (an outage) leave it as it is.
func (a *Agent) checkTrust(err error) bool {
	untrusted := err != nil && untrustedServer(err)
	var apiErr *APIError
	answered := err == nil || errors.Is(err, ErrNotModified) || errors.As(err, &apiErr)
	if !untrusted && !answered {
		return false
	}
	now := a.now()
	w := &a.trust
	w.mu.Lock()
	defer w.mu.Unlock()
	if !untrusted {
		if w.problem != "" {
			w.problem, w.logged = "", time.Time{}
			a.cfg.Router.SetProblem("")
			a.log.Info("the control plane's certificate verifies again")
		}
		return false
	}
	reason := fmt.Sprintf("the control plane's certificate does not verify against the CA this host joined with "+
		"(%v); nothing is sent to it. If its CA was replaced, join this host again with a new join token "+
		"and a fresh --data-dir", err)
	if reason != w.problem {
		w.problem = reason
		a.cfg.Router.SetProblem(reason)
	}
	if w.logged.IsZero() || now.Sub(w.logged) >= a.cfg.UntrustedLogInterval {
		w.logged = now
		a.log.Error("cannot verify the control plane: containers keep running from the cache, but no desired state or report goes through",
			zap.Error(err), zap.Duration("repeated_every", a.cfg.UntrustedLogInterval))
	}
	return true
}
