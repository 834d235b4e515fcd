package fleet

import (
	"context"
	"fmt"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// EndedRight is a principal whose right to what it holds open ended, with
// the reason its holder is told (it holds the token, so saying why gives
// nothing away). Exactly one of AdminToken and Host is set.
type EndedRight struct {
	// AdminToken is the name of a named token, admin or deploy (one name
	// space for both).
	AdminToken string
	Host       string
	Reason     string
}

// RevokedReason is what the holder of a revoked named token is told.
func RevokedReason(t store.AdminToken) string {
	return fmt.Sprintf("%s was revoked at %s: ask an admin for a new one", t.Describe(), t.RevokedAt.Format(time.RFC3339))
}

// EndedRights returns, of the named tokens (admin or deploy) and the host IDs given
// (what a server holds streams and polls open for), those whose right
// ended: a token revoked, a host removed. One that the store does not know
// counts as ended, since nothing unknown holds a right; the first admin
// token never ends. It reads the stored tokens and hosts, so whatever server
// revoked or removed, every server that asks sees it.
func (s *Service) EndedRights(ctx context.Context, adminTokens, hosts []string) ([]EndedRight, error) {
	var out []EndedRight
	if len(adminTokens) > 0 {
		all, err := s.deps.AdminTokens.ListAdminTokens(ctx)
		if err != nil {
			return nil, fmt.Errorf("ended rights: %w", err)
		}
		byName := make(map[string]store.AdminToken, len(all))
		for _, t := range all {
			byName[t.Name] = t
		}
		for _, name := range adminTokens {
			t, ok := byName[name]
			switch {
			case name == store.FirstAdminToken:
			case !ok:
				out = append(out, EndedRight{AdminToken: name, Reason: fmt.Sprintf("token %q is not known to the server", name)})
			case t.Revoked():
				out = append(out, EndedRight{AdminToken: name, Reason: RevokedReason(t)})
			}
		}
	}
	if len(hosts) > 0 {
		all, err := s.deps.Members.ListHostIdentities(ctx)
		if err != nil {
			return nil, fmt.Errorf("ended rights: %w", err)
		}
		byID := make(map[string]store.HostIdentity, len(all))
		for _, h := range all {
			byID[h.ID] = h
		}
		for _, id := range hosts {
			h, ok := byID[id]
			switch {
			case !ok:
				out = append(out, EndedRight{Host: id, Reason: fmt.Sprintf("host %s is not known to the server", id)})
			case h.Removed():
				out = append(out, EndedRight{Host: id, Reason: fmt.Sprintf("host %s was removed (hatch hosts remove) at %s: its token is refused; "+
					"to bring the machine back, join again with a new join token", id, h.RemovedAt.Format(time.RFC3339))})
			}
		}
	}
	return out, nil
}
