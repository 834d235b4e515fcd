package server

import (
	"net/http"

	"github.com/hatchery/hatchery/internal/api"
)

// setHostCapacity pins a host's capacity (hatch hosts set): admins only,
// since a host that could set its own would draw every new replica.
func (h fleetAPI) setHostCapacity(w http.ResponseWriter, r *http.Request) error {
	var req api.SetHostCapacity
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	out, err := h.svc.SetHostCapacity(r.Context(), r.PathValue("id"), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
