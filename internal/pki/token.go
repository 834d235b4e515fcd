package pki

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
)

// Token kinds: what a token lets its holder do.
const (
	KindAdmin = "admin" // everything
	KindJoin  = "join"  // trade once (or a few times) for a host identity
	KindHost  = "host"  // one host's desired state, blobs and status
	// KindDeploy is a deploy token: one project's plans, applies and reads
	// (and its exec, when made with it), for a CI pipeline.
	KindDeploy = "deploy"
)

// Token is what the server prints and clients present:
// "hatch-<kind>.<secret>.<ca-fingerprint>". The fingerprint lets the client
// verify the server before it sends the secret; only the secret authenticates.
type Token struct {
	Kind        string
	Secret      string
	Fingerprint string
}

// NewToken makes a token of the given kind with 32 random bytes of secret.
func NewToken(kind, fingerprint string) Token {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return Token{Kind: kind, Secret: base64.RawURLEncoding.EncodeToString(b), Fingerprint: fingerprint}
}

// String formats the token as it is printed and sent.
func (t Token) String() string {
	return "hatch-" + t.Kind + "." + t.Secret + "." + t.Fingerprint
}

// Hash returns the hex SHA-256 of the secret: what the server stores. The
// secret is 256 random bits, so a plain hash is not open to guessing.
func (t Token) Hash() string { return HashSecret(t.Secret) }

// HashSecret returns the hex SHA-256 of a token secret.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// EqualHash compares two hashes in constant time.
func EqualHash(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// ParseToken parses "hatch-<kind>.<secret>.<fingerprint>". The error never
// repeats the token: it may be a real secret pasted in the wrong place.
func ParseToken(s string) (Token, error) {
	s = strings.TrimSpace(s)
	rest, ok := strings.CutPrefix(s, "hatch-")
	parts := strings.Split(rest, ".")
	if !ok || len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return Token{}, fmt.Errorf("malformed token: want hatch-<kind>.<secret>.<fingerprint>")
	}
	switch parts[0] {
	case KindAdmin, KindJoin, KindHost, KindDeploy:
	default:
		return Token{}, fmt.Errorf("malformed token: unknown kind %q (want admin, deploy, join or host)", parts[0])
	}
	if b, err := hex.DecodeString(parts[2]); err != nil || len(b) != sha256.Size {
		return Token{}, fmt.Errorf("malformed token: its fingerprint is not 64 hex digits")
	}
	return Token{Kind: parts[0], Secret: parts[1], Fingerprint: strings.ToLower(parts[2])}, nil
}
