package server

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
)

// authenticate resolves the request's bearer token under the limit on failed
// authentications. When the caller is refused it answers itself (401 for a
// token not accepted, 429 instead while the address is over the limit, 500
// when the store failed) and returns false.
//
// The token is looked at first, whatever the limit: a valid token is never
// refused by it, so a neighbour behind the same NAT or load balancer who keeps
// failing cannot lock a host's reports out (and have it marked down). Only
// failures count, and only failures are refused. That the right guess still
// gets in while its address is limited tells a guesser nothing it could use:
// a token's secret is 256 random bits.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (Principal, bool) {
	p, err := s.deps.Auth.Authenticate(r.Context(), bearer(r.Header.Get("Authorization")))
	switch {
	case err == nil:
		return p, true
	case errors.Is(err, ErrUnauthenticated):
		s.refuse(w, r, err)
	default: // the server's failure (an unreachable database: 503), never the caller's
		s.fail(w, r, "authenticate "+r.URL.Path, err)
	}
	return Principal{}, false
}

// refuse answers a failed authentication: 429 while the address is over the
// limit (the failure is not counted again: the address waits for one to be
// forgiven), else 401, counting the failure.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, err error) {
	key, now := clientKey(r.RemoteAddr), s.now()
	if wait := s.limiter.retryAfter(key, now); wait > 0 {
		s.metrics.authLimited.Inc()
		secs := int((wait + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		writeError(w, api.Errorf(api.CodeRateLimited,
			"too many failed authentications from this address: retry in %ds", secs))
		return
	}
	s.metrics.authFailures.Inc()
	if s.limiter.fail(key, now) {
		// Once per emptied bucket: an attack does not flood the log.
		s.log.Warn("failed authentications over the limit: refusing the address's failed attempts for a while",
			zap.String("client", key), zap.Duration("retry_after", s.limiter.retryAfter(key, now)))
	}
	s.unauthorized(w, err)
}

// joinTokenOnly lets a usable join token in, and nothing else: joining is
// all it may do, and nobody joins with another token.
func joinTokenOnly(p Principal, _ *http.Request) bool { return p.JoinToken != "" }

// hostBlobOrAdmin lets the admin read any blob, and a host only the blobs its
// own desired state references. A store failure refuses (and is logged): an
// agent retries, and a doubt never opens a blob.
func (s *Server) hostBlobOrAdmin(p Principal, r *http.Request) bool {
	if p.Admin {
		return true
	}
	if p.HostID == "" {
		return false
	}
	ok, err := s.deps.Fleet.ReferencesBlob(r.Context(), p.HostID, r.PathValue("digest"))
	if err != nil {
		s.log.Warn("blob access refused: the host's desired state could not be read",
			zap.String("host", p.HostID), zap.Error(err))
	}
	return ok
}

// blobCheckers may ask whether the server has a blob: who may read it, and
// every deploy token, which asks before it uploads a build context. The
// answer tells only whether content with that sha256 is there.
func (s *Server) blobCheckers(p Principal, r *http.Request) bool {
	return p.Deploy() || s.hostBlobOrAdmin(p, r)
}

// join trades a usable join token for a new host.
func (h fleetAPI) join(w http.ResponseWriter, r *http.Request) error {
	var req api.JoinRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	out, err := h.svc.Join(r.Context(), bearer(r.Header.Get("Authorization")), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// maxCSRBody limits a certificate request's body: a CSR is well under 1 KiB.
const maxCSRBody = 64 << 10

// renewHostCertificate signs a host's new CSR with its own ID.
func (h fleetAPI) renewHostCertificate(w http.ResponseWriter, r *http.Request) error {
	var req api.CertificateRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	out, err := h.svc.RenewCertificate(r.PathValue("id"), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// ownHostOnly lets a host act on its own {id}, and nobody else: not even the
// admin gets a host's certificate, whose key only the host makes. Removed
// hosts never get here, their token being refused.
func ownHostOnly(p Principal, r *http.Request) bool {
	return p.HostID != "" && p.HostID == r.PathValue("id")
}

func (h fleetAPI) createJoinToken(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateJoinTokenRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	out, err := h.svc.CreateJoinToken(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func (h fleetAPI) listJoinTokens(w http.ResponseWriter, r *http.Request) error {
	all, err := h.svc.JoinTokens(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.JoinTokenList{JoinTokens: all})
	return nil
}

func (h fleetAPI) revokeJoinToken(w http.ResponseWriter, r *http.Request) error {
	out, err := h.svc.RevokeJoinToken(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h fleetAPI) createAdminToken(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateAdminTokenRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	out, err := h.svc.CreateAdminToken(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func (h fleetAPI) listAdminTokens(w http.ResponseWriter, r *http.Request) error {
	all, err := h.svc.AdminTokens(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.AdminTokenList{AdminTokens: all})
	return nil
}

func (h fleetAPI) revokeAdminToken(w http.ResponseWriter, r *http.Request) error {
	out, err := h.svc.RevokeAdminToken(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// removeHost revokes a host's token and marks it removed.
func (h fleetAPI) removeHost(w http.ResponseWriter, r *http.Request) error {
	out, err := h.svc.RemoveHost(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
