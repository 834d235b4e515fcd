package containers

import "fmt"

// ImageError is a start that failed because the registry refused the pull
// of its image for good: a login it does not accept or none (401, 403), or
// no such repository, tag or digest (404). Trying again changes nothing
// until the spec (or the login) does, so the agent takes it for a failed
// rollout of the workload's spec, not for a start to retry.
type ImageError struct {
	Image    string
	Registry string // host[:port]
	// Reason is the registry's own words, as the Engine relays them.
	Reason string
	// Login is the handle of the login the pull used
	// (contract.RegistryAuth.Handle), "" for none: a new login is a new
	// attempt.
	Login string
}

func (e *ImageError) Error() string {
	return fmt.Sprintf("pull %s: registry %s refused: %s", e.Image, e.Registry, e.Reason)
}
