package store

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/seal"
)

// EncodeDesiredState turns a host's desired state into its stored form: JSON
// with every secret value sealed, so that a copy of the database alone reveals
// no secret. The state's Version is kept as it is (secret values are not part
// of it: a new value comes with a new handle).
func EncodeDesiredState(box *seal.Box, d contract.DesiredState) (DesiredState, error) {
	d.Workloads = append([]contract.WorkloadSpec(nil), d.Workloads...)
	for i := range d.Workloads {
		sealSecrets(box, &d.Workloads[i])
	}
	d.Runs = append([]contract.Run(nil), d.Runs...)
	for i := range d.Runs {
		sealSecrets(box, &d.Runs[i].Workload)
	}
	d.Certificates = append([]contract.Certificate(nil), d.Certificates...)
	for i := range d.Certificates {
		if c := &d.Certificates[i]; c.Key != "" {
			c.Key = contract.SecretValue(box.Seal([]byte(c.Key)))
		}
	}
	d.Challenges = append([]contract.Challenge(nil), d.Challenges...)
	for i := range d.Challenges {
		if c := &d.Challenges[i]; c.ALPNKey != "" {
			c.ALPNKey = contract.SecretValue(box.Seal([]byte(c.ALPNKey)))
		}
	}
	d.VolumeTasks = append([]contract.VolumeTask(nil), d.VolumeTasks...)
	for i := range d.VolumeTasks {
		if t := &d.VolumeTasks[i]; t.Key != "" {
			t.Key = contract.SecretValue(box.Seal([]byte(t.Key)))
		}
	}
	doc, err := json.Marshal(d)
	if err != nil {
		return DesiredState{}, fmt.Errorf("encode desired state of %s: %w", d.HostID, err)
	}
	return DesiredState{HostID: d.HostID, Version: d.Version, Doc: doc}, nil
}

// DecodeDesiredState turns a stored desired state back into what the host
// gets, its secret values opened. A host with no stored state gets an empty
// one carrying its ID.
func DecodeDesiredState(box *seal.Box, s DesiredState) (contract.DesiredState, error) {
	if len(s.Doc) == 0 {
		return contract.DesiredState{HostID: s.HostID, Version: s.Version}, nil
	}
	d, err := contract.DecodeDesiredState(bytes.NewReader(s.Doc))
	if err != nil {
		return contract.DesiredState{}, fmt.Errorf("stored desired state of %s: %w", s.HostID, err)
	}
	for i := range d.Workloads {
		if err := openSecrets(box, &d.Workloads[i]); err != nil {
			return contract.DesiredState{}, fmt.Errorf("workload %s on %s: %w", d.Workloads[i].ID(), s.HostID, err)
		}
	}
	for i := range d.Runs {
		if err := openSecrets(box, &d.Runs[i].Workload); err != nil {
			return contract.DesiredState{}, fmt.Errorf("run %s on %s: %w", d.Runs[i].ID, s.HostID, err)
		}
	}
	for i := range d.Certificates {
		c := &d.Certificates[i]
		if c.Key == "" {
			continue
		}
		plain, err := box.Open(string(c.Key))
		if err != nil {
			return contract.DesiredState{}, fmt.Errorf("key of the certificate of %s on %s: %w", c.Host, s.HostID, err)
		}
		c.Key = contract.SecretValue(plain)
	}
	for i := range d.Challenges {
		c := &d.Challenges[i]
		if c.ALPNKey == "" {
			continue
		}
		plain, err := box.Open(string(c.ALPNKey))
		if err != nil {
			return contract.DesiredState{}, fmt.Errorf("key of the ACME challenge of %s on %s: %w", c.Host, s.HostID, err)
		}
		c.ALPNKey = contract.SecretValue(plain)
	}
	for i := range d.VolumeTasks {
		t := &d.VolumeTasks[i]
		if t.Key == "" {
			continue
		}
		plain, err := box.Open(string(t.Key))
		if err != nil {
			return contract.DesiredState{}, fmt.Errorf("key of volume task %s on %s: %w", t.ID, s.HostID, err)
		}
		t.Key = contract.SecretValue(plain)
	}
	return d, nil
}

// sealSecrets seals the secret values and the registry password of w, in
// copies of its secrets and pull auth.
func sealSecrets(box *seal.Box, w *contract.WorkloadSpec) {
	w.Secrets = append([]contract.SecretFile(nil), w.Secrets...)
	for j := range w.Secrets {
		if w.Secrets[j].Value != "" {
			w.Secrets[j].Value = contract.SecretValue(box.Seal([]byte(w.Secrets[j].Value)))
		}
	}
	if a := w.PullAuth; a != nil && a.Password != "" {
		c := *a
		c.Password = contract.SecretValue(box.Seal([]byte(a.Password)))
		w.PullAuth = &c
	}
}

// openSecrets opens the sealed secret values and registry password of w.
func openSecrets(box *seal.Box, w *contract.WorkloadSpec) error {
	for j := range w.Secrets {
		sec := &w.Secrets[j]
		if sec.Value == "" {
			continue
		}
		plain, err := box.Open(string(sec.Value))
		if err != nil {
			return fmt.Errorf("secret %s: %w", sec.Name, err)
		}
		sec.Value = contract.SecretValue(plain)
	}
	if a := w.PullAuth; a != nil && a.Password != "" {
		plain, err := box.Open(string(a.Password))
		if err != nil {
			return fmt.Errorf("password of registry %s: %w", a.Registry, err)
		}
		c := *a
		c.Password = contract.SecretValue(plain)
		w.PullAuth = &c
	}
	return nil
}

// EncodePeers turns the fleet's peer list into its stored form. Peers hold
// no secret.
func EncodePeers(peers []contract.Peer) (PeerList, error) {
	doc, err := json.Marshal(peers)
	if err != nil {
		return PeerList{}, fmt.Errorf("encode the peer list: %w", err)
	}
	return PeerList{Version: contract.PeersVersion(peers), Doc: doc}, nil
}

// DecodePeers turns a stored peer list back; none stored gives nil.
func DecodePeers(l PeerList) ([]contract.Peer, error) {
	if len(l.Doc) == 0 {
		return nil, nil
	}
	var peers []contract.Peer
	if err := json.Unmarshal(l.Doc, &peers); err != nil {
		return nil, fmt.Errorf("stored peer list %s: %w", l.Version, err)
	}
	return peers, nil
}

// WholeDesiredState is what a host gets: its stored state, its secrets
// opened, with the fleet's peers (of version peersVersion), at the version
// of both together (contract.CombineVersions).
func WholeDesiredState(box *seal.Box, s DesiredState, peers []contract.Peer, peersVersion string) (contract.DesiredState, error) {
	d, err := DecodeDesiredState(box, s)
	if err != nil {
		return contract.DesiredState{}, err
	}
	d.Peers, d.PeersVersion = peers, peersVersion
	d.Version = contract.CombineVersions(s.Version, peersVersion)
	return d, nil
}
