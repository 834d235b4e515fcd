package desired

import "regexp"

// handlePattern finds secret handles (see SecretHandle) in env values.
var handlePattern = regexp.MustCompile(`hatch-secret:([A-Za-z0-9_.-]+):([A-Za-z0-9_.-]+):([0-9a-f]{32})`)

// SecretHandle is a secret's handle, its output: its name and ID, and the
// fingerprint of its value. Eggs carry it in their inputs (mounts, env), and
// the desired state of their hosts gets the value it names.
func SecretHandle(name, id, fingerprint string) string {
	return "hatch-secret:" + name + ":" + id + ":" + fingerprint
}

// parseHandle returns the secret name and fingerprint a handle carries.
func parseHandle(h string) (name, fingerprint string, ok bool) {
	m := handlePattern.FindStringSubmatch(h)
	if m == nil || m[0] != h {
		return "", "", false
	}
	return m[1], m[3], true
}
