package containers

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

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
