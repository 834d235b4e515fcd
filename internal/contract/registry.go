package contract

import "github.com/distribution/reference"

// DockerHub is the registry host of an image reference that names none
// ("nginx:1.27", "acme/web"), as Docker resolves it.
const DockerHub = "docker.io"

// ImageRegistry returns the registry host[:port] an image reference is
// pulled from, as the Engine resolves it (DockerHub for a bare name), or ""
// for a reference Docker cannot parse. Registry logins are matched on it.
func ImageRegistry(image string) string {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return ""
	}
	return reference.Domain(named)
}

// ValidRegistryHost reports whether host is a registry's host[:port] as an
// image reference names it: a hostname or IP address, with an optional
// port, and nothing else (no scheme, no path).
func ValidRegistryHost(host string) bool {
	return host != "" && ImageRegistry(host+"/x") == host
}
