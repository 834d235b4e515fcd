package server

import (
	"net/http"

	"github.com/hatchery/hatchery/internal/api"
)

// putRegistry stores the cluster's login for the registry {host}.
func (h fleetAPI) putRegistry(w http.ResponseWriter, r *http.Request) error {
	var req api.RegistryLoginRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	out, err := h.svc.LoginRegistry(r.Context(), r.PathValue("host"), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// deleteRegistry deletes the cluster's login for the registry {host}.
func (h fleetAPI) deleteRegistry(w http.ResponseWriter, r *http.Request) error {
	out, err := h.svc.LogoutRegistry(r.Context(), r.PathValue("host"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// listRegistries lists the cluster's registry logins, without passwords.
func (h fleetAPI) listRegistries(w http.ResponseWriter, r *http.Request) error {
	all, err := h.svc.RegistryLogins(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.RegistryLoginList{Registries: all})
	return nil
}
