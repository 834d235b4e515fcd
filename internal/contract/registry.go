package contract

import (
	"fmt"

	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
)

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

// PinImage returns image pinned to dgst ("sha256:..."): its repository
// with the digest and without the tag, "ghcr.io/acme/web@sha256:...", as
// the Engine pulls and inspects it. A bare name stays familiar
// ("nginx@sha256:...").
func PinImage(image, dgst string) (string, error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", fmt.Errorf("image %q: %w", image, err)
	}
	d, err := digest.Parse(dgst)
	if err != nil {
		return "", fmt.Errorf("image %q: digest %q: %w", image, dgst, err)
	}
	pinned, err := reference.WithDigest(reference.TrimNamed(named), d)
	if err != nil {
		return "", fmt.Errorf("image %q: %w", image, err)
	}
	return reference.FamiliarString(pinned), nil
}

// ImageDigest returns the digest an image reference names
// ("repo@sha256:..."), or "" for a tag or a reference Docker cannot parse:
// such a reference is pinned already.
func ImageDigest(image string) string {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return ""
	}
	if d, ok := named.(reference.Digested); ok {
		return d.Digest().String()
	}
	return ""
}
