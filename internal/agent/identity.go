package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/apiclient"
	"github.com/hatchery/hatchery/internal/fsutil"
	"github.com/hatchery/hatchery/internal/pki"
)

// Files the agent keeps in its data directory.
const (
	identityFile = "identity.json"
	caFile       = "ca.pem"
	cacheFile    = "desired-state.json"
	sealKeyFile  = "seal.key"
	stateFile    = "agent-state.json"
)

// PrepareDataDir makes the data directory its owner's only (0700), before
// anything is written there: made if missing, tightened if it is open and
// the agent's (it holds one of the agent's files, or nothing), refused
// otherwise (fsutil.PrivateDir). It then removes the temporary files that
// writes of the agent's files left when the agent was killed mid-write
// (fsutil.RemoveTemps), logged: nothing writes them yet, and on a small
// data dir they take the space the next write of the cache needs.
func PrepareDataDir(dataDir string, log *zap.Logger) error {
	if err := fsutil.PrivateDir(dataDir, identityFile, cacheFile, stateFile, sealKeyFile); err != nil {
		return err
	}
	removed, err := fsutil.RemoveTemps(dataDir, identityFile, caFile, cacheFile, stateFile, sealKeyFile,
		hostKeyFile, hostCertFile, hostCAFile)
	if len(removed) > 0 {
		log.Info("removed temporary files a killed write left in the data dir", zap.Strings("files", removed))
	}
	return err
}

// Identity is who this agent is to the control plane, as the join gave it.
// It is kept in the data directory (mode 0600: it holds the host token), so
// that every later start needs only --data-dir.
type Identity struct {
	// Server is the control plane's base URL, "https://host:port", as the
	// operator gave it at the join: several are comma-separated.
	Server string `json:"server"`
	// Servers are the control plane's live servers, as its last
	// desired-state answer listed them (api.HeaderServers): kept so that a
	// restarted agent can still fail over to a server added since the join.
	Servers []string `json:"servers,omitempty"`
	HostID  string   `json:"host_id"`
	// Name is the host name given at join (`--name`), used in placement.
	Name string `json:"name,omitempty"`
	// Token is the host token, "hatch-host.<secret>.<fingerprint>".
	Token string `json:"token"`
	// CAFingerprint is the hex SHA-256 of the control plane's CA: the
	// agent's only trust anchor.
	CAFingerprint string `json:"ca_fingerprint"`
}

// URLs are every server this identity may talk to: the operator's, then
// the live ones the control plane listed, each once.
func (id Identity) URLs() []string {
	return apiclient.ParseServers(append([]string{id.Server}, id.Servers...)...)
}

// Validate reports an identity that cannot be used to talk to the server.
func (id Identity) Validate() error {
	switch {
	case id.Server == "":
		return errors.New("identity: no server URL")
	case id.HostID == "":
		return errors.New("identity: no host ID")
	case id.Token == "":
		return errors.New("identity: no host token")
	}
	tok, err := pki.ParseToken(id.Token)
	if err != nil {
		return fmt.Errorf("identity: host token: %w", err)
	}
	if tok.Kind != pki.KindHost || tok.Fingerprint != id.CAFingerprint {
		// The client pins the fingerprint the token carries: it must be
		// the CA this identity was joined to.
		return errors.New("identity: the host token does not belong to the CA fingerprint kept beside it")
	}
	return nil
}

// LoadIdentity reads the identity kept in dataDir. A missing file is not an
// error: ok is false and the agent must join.
func LoadIdentity(dataDir string) (id Identity, ok bool, err error) {
	path := filepath.Join(dataDir, identityFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Identity{}, false, nil
	}
	if err != nil {
		return Identity{}, false, fmt.Errorf("read identity: %w", err)
	}
	if err := json.Unmarshal(data, &id); err != nil {
		return Identity{}, false, fmt.Errorf("identity %s: %w (remove the file and join again)", path, err)
	}
	if err := id.Validate(); err != nil {
		return Identity{}, false, fmt.Errorf("%s: %w (remove the file and join again)", path, err)
	}
	return id, true, nil
}

// SaveIdentity writes the identity, and the server's CA certificate (PEM)
// when known, into dataDir atomically, both 0600 (the identity holds the
// host token; the data dir is its owner's only).
func SaveIdentity(dataDir string, id Identity, caPEM []byte) error {
	if err := id.Validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	data, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return fmt.Errorf("encode identity: %w", err)
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(dataDir, identityFile), append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("write identity: %w", err)
	}
	if len(caPEM) > 0 {
		if err := fsutil.WriteFileAtomic(filepath.Join(dataDir, caFile), caPEM, 0o600); err != nil {
			return fmt.Errorf("write CA certificate: %w", err)
		}
	}
	return nil
}
