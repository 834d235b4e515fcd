package api

import "time"

// RegistryLoginRequest is PUT /api/v1/registries/{host}: the cluster-wide
// login to an image registry. The password is never answered back.
type RegistryLoginRequest struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// RegistryLogin is a cluster-wide registry login as answers show it:
// without its password.
type RegistryLogin struct {
	Host      string    `json:"host"`
	Username  string    `json:"username"`
	UpdatedAt time.Time `json:"updated_at"`
}

// RegistryLoginList is GET /api/v1/registries.
type RegistryLoginList struct {
	Registries []RegistryLogin `json:"registries"`
}
