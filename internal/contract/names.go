package contract

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strconv"
	"strings"
)

// The names Docker objects get, declared here because both sides compute
// them: the control plane writes network and volume names into the desired
// state, the agent creates containers, networks and volumes by them.
//
// Names are readable and unique: a prefix, the readable parts, and a short hash
// of the full tuple, so that "a-b"/"c" and "a"/"b-c" never collide and two
// namespaces, or two agents sharing one Docker Engine, never meet.

// ContainerName returns the name of a new container for a slot:
// hatch-<project>-<egg>-<slot>-<hash of namespace, project, egg, host>-<suffix>.
// The suffix tells apart successive containers of one slot (see RandomSuffix).
func ContainerName(namespace, project, egg string, slot int, hostID, suffix string) string {
	return "hatch-" + project + "-" + egg + "-" + strconv.Itoa(slot) + "-" +
		tupleHash(namespace, project, egg, hostID) + "-" + suffix
}

// NetworkName returns the Docker name of a project's network on a host.
func NetworkName(hostID, namespace, project, name string) string {
	return "hatch-" + project + "-" + name + "-" + tupleHash(hostID, namespace, project, name)
}

// VolumeName returns the Docker name of a project's volume on a host.
func VolumeName(hostID, namespace, project, name string) string {
	return "hatch-" + project + "-" + name + "-" + tupleHash(hostID, namespace, project, name)
}

// namePartRE is Docker's rule for object names, at most 128 characters:
// no slash, no dot first (so neither "." nor ".."), nothing but ASCII.
var namePartRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// ValidNamePart reports whether s may be a part of a container's name: a
// workload's namespace, project or egg. The agent joins container names
// into paths (the secret files' directory), so a part must also be a safe
// path element; the control plane's rules are stricter, and this is the
// agent's own line against a desired state that broke them.
func ValidNamePart(s string) bool { return namePartRE.MatchString(s) }

// RandomSuffix returns 6 random hex digits for ContainerName.
func RandomSuffix() string {
	var b [3]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it panics instead)
	return hex.EncodeToString(b[:])
}

// tupleHash hashes the parts with a separator that cannot occur in them, so
// the boundaries between parts count.
func tupleHash(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(sum[:4])
}
