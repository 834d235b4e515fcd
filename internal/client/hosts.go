package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
)

// Hosts makes the operator's calls at /api/v1/hosts (docs/API.md, "Hosts");
// the hosts' own calls there are the agent's. Get one with Client.Hosts.
type Hosts struct{ c *Client }

// List lists every host, sorted by ID.
func (h *Hosts) List(ctx context.Context) ([]api.Host, error) {
	var out api.HostList
	err := h.c.Do(ctx, http.MethodGet, "/api/v1/hosts", nil, &out)
	return out.Hosts, err
}

// Report returns a host's last status report (nil if none).
func (h *Hosts) Report(ctx context.Context, hostID string) (*contract.StatusReport, error) {
	var out api.HostDetail
	err := h.c.Do(ctx, http.MethodGet, "/api/v1/hosts/"+url.PathEscape(hostID), nil, &out)
	return out.Status, err
}

// Remove revokes the token of the host with the name (or ID): its agent
// is refused from its next request on, and its replicas are placed elsewhere.
func (h *Hosts) Remove(ctx context.Context, nameOrID string) (api.RemovedHost, error) {
	var out api.RemovedHost
	err := h.c.Do(ctx, http.MethodDelete, "/api/v1/hosts/"+url.PathEscape(nameOrID), nil, &out)
	return out, err
}

// SetCapacity pins the capacity of the host with the name (or ID):
// placement believes it from then on, whatever the host reports. It returns
// the host as hatch hosts shows it.
func (h *Hosts) SetCapacity(ctx context.Context, nameOrID string, req api.SetHostCapacity) (api.Host, error) {
	var out api.Host
	err := h.c.Do(ctx, http.MethodPut, "/api/v1/hosts/"+url.PathEscape(nameOrID)+"/capacity", req, &out)
	return out, err
}
