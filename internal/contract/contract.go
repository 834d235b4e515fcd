// Package contract holds the wire types exchanged between the control plane and
// a host's agent: the desired state a host pulls, and the status report it sends
// back.
//
// Everything here is plain JSON. Decoding ignores unknown fields and every field
// added later must have a zero value that means "as before", so a control plane
// and an agent one version apart still understand each other.
//
// The package also defines SpecHash, the single definition of "this workload
// needs a new container", shared by the control plane (which shows it in plans
// and rollouts) and the agent (which labels containers with it and rolls the
// ones whose label differs), and the names Docker objects get (ContainerName,
// NetworkName, VolumeName), which the control plane writes into desired
// states and the agent creates.
package contract

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// DesiredState is everything one host should run, as the control plane computed
// it. It is the whole truth for the host: a workload absent from it is removed.
type DesiredState struct {
	// HostID is the host this state is for. The agent touches only containers
	// labelled with it.
	HostID string `json:"host_id"`
	// Version is a hash of the content (see ComputeVersion): equal content,
	// equal version, so an agent can tell "nothing changed" from one string.
	Version   string         `json:"version,omitempty"`
	Workloads []WorkloadSpec `json:"workloads,omitempty"`
	// Volumes lists the named volumes this host holds for its projects: those
	// to keep (in use or retained after removal from the project file) and
	// those marked for deletion (hatch destroy --volumes).
	Volumes []VolumeSpec `json:"volumes,omitempty"`
	// Peers is the valid host set: every host of the cluster that is not
	// removed, this one included. The mesh accepts connections only from
	// the hosts listed here, and closes those of a host that leaves it.
	// It is the same in every host's state, so the control plane keeps it
	// once for the fleet (see PeersVersion).
	Peers []Peer `json:"peers,omitempty"`
	// PeersVersion is the version of Peers (see PeersVersion), set by the
	// control plane. An agent that sends it back with its long-poll is
	// answered without Peers while they are unchanged (PeersOmitted): at
	// 1,000 hosts the peer list is most of every state, and an apply would
	// otherwise send it to every host again. It is not hashed: Version
	// covers Peers themselves.
	PeersVersion string `json:"peers_version,omitempty"`
	// PeersOmitted says Peers were left out because the agent holds those of
	// PeersVersion already.
	PeersOmitted bool `json:"peers_omitted,omitempty"`
	// Services are the eggs this host serves whether or not it runs them:
	// every egg of the cluster with routes or published ports (every host's
	// ingress answers for them), every egg with a port of a project one of
	// whose networks a workload on this host joins too, and every egg a
	// workload on this host references (a relay on this host stands for
	// them, carrying their names). See Service.
	Services []Service `json:"services,omitempty"`
	// Certificates are the TLS certificates of the hostnames whose routes
	// this host serves over HTTPS (every host serves every route): obtained
	// by the control plane's ACME client, or the user's own from secrets.
	// Their keys are secrets: sealed at rest, never logged.
	Certificates []Certificate `json:"certificates,omitempty"`
	// Challenges are the ACME HTTP-01 challenges the control plane is
	// answering: the ingress serves each key authorization at
	// /.well-known/acme-challenge/<token>, and the agent reports the tokens
	// it loaded (StatusReport.Challenges) so the order proceeds only once
	// every host can answer the CA.
	Challenges []Challenge `json:"challenges,omitempty"`
	// Runs are the runs this host is to start, or has run and keeps (see
	// Run): a run absent from it is never started, and its container, if
	// any, is removed.
	Runs []Run `json:"runs,omitempty"`
	// VolumeTasks are the backups and restores this host is to do (see
	// VolumeTask): a task absent from it is never begun, and one begun is
	// abandoned.
	VolumeTasks []VolumeTask `json:"volume_tasks,omitempty"`
	// FenceAfter is the control plane's --fence-after, the same in every
	// host's state: an agent whose status reports have had no 2xx answer
	// for that long stops its Fenced workloads, so that a volume failed
	// over elsewhere never runs in two places (docs/BACKUPS.md,
	// "Failover"). 0: no fencing (and what an older server sends).
	FenceAfter time.Duration `json:"fence_after,omitempty"`
}

// Certificate returns the certificate of host, if the state holds one.
func (d DesiredState) Certificate(host string) (Certificate, bool) {
	for _, c := range d.Certificates {
		if c.Host == host {
			return c, true
		}
	}
	return Certificate{}, false
}

// Certificate is a hostname's certificate chain and private key, PEM.
type Certificate struct {
	Host  string      `json:"host"`
	Chain string      `json:"chain"`
	Key   SecretValue `json:"key,omitempty"`
	// Source is "acme" or "secret", for status and for the ACME client,
	// which replaces only its own certificates.
	Source string `json:"source,omitempty"`
}

// Challenge is one pending ACME challenge: HTTP-01 (KeyAuth, served at
// /.well-known/acme-challenge/<Token>) or TLS-ALPN-01 (Host, and the
// self-signed ALPNCert and ALPNKey the HTTPS listener presents to a
// client asking for acme-tls/1 with that name; the key is a throwaway one,
// made for this challenge only, yet never logged).
type Challenge struct {
	Token    string      `json:"token"`
	KeyAuth  string      `json:"key_auth,omitempty"`
	Host     string      `json:"host,omitempty"`
	ALPNCert string      `json:"alpn_cert,omitempty"`
	ALPNKey  SecretValue `json:"alpn_key,omitempty"`
}

// Service is an egg as a host that serves it sees it, wherever its replicas
// run. The host's ingress and relays send each new connection to a healthy,
// undrained replica: one of its own if it has one, else through the mesh to
// one of Hosts, which picks among its own.
type Service struct {
	Namespace string `json:"namespace"`
	Project   string `json:"project"`
	Egg       string `json:"egg"`
	// Port is the port the egg listens on inside its containers: what a
	// route, a relay and a mesh stream reach.
	Port int `json:"port,omitempty"`
	// Hosts are the IDs of the hosts placed to run its replicas, this one
	// included if it does; sorted. Which of their replicas are healthy is
	// learnt through the mesh, not from here.
	Hosts []string `json:"hosts,omitempty"`
	// Routes and Ports are the egg's claims on every host of the cluster.
	Routes []Route         `json:"routes,omitempty"`
	Ports  []PublishedPort `json:"ports,omitempty"`
	// DrainTimeout bounds how long the ingress lets a draining replica's
	// requests finish (zero: the default).
	DrainTimeout time.Duration `json:"drain_timeout,omitempty"`
	// Names are the DNS names this host's consumers reach the egg by (its
	// name, then its aliases), and Networks the Docker networks of this host
	// on which a relay carries them; both empty when no workload on this
	// host shares a network with the egg or references it.
	Names    []string `json:"names,omitempty"`
	Networks []string `json:"networks,omitempty"`
}

// ID returns the service's workload ID, "namespace/project/egg".
func (s Service) ID() string { return WorkloadID(s.Namespace, s.Project, s.Egg) }

// Relayed reports whether the host serving s stands for it on its Docker
// networks with a relay: consumers there reach it by name, on a network,
// at its port.
func (s Service) Relayed() bool {
	return len(s.Names) > 0 && len(s.Networks) > 0 && s.Port > 0
}

// StreamPorts are the ports of the mesh streams a host serving s opens to
// s's replicas on other hosts, sorted (see Reach.Ports): 0 when it routes
// s (HTTP), each published port's target, and s's port when a relay there
// stands for it. Nothing else: a host that only routes an egg's HTTP may
// not open a raw TCP stream to the port its routes reach.
func (s Service) StreamPorts() []int {
	var ports []int
	if len(s.Routes) > 0 {
		ports = append(ports, 0)
	}
	for _, p := range s.Ports {
		if p.ContainerPort > 0 {
			ports = append(ports, p.ContainerPort)
		}
	}
	if s.Relayed() {
		ports = append(ports, s.Port)
	}
	return slices.Compact(slices.Sorted(slices.Values(ports)))
}

// Peer is a host of the cluster as another host's mesh sees it.
type Peer struct {
	HostID string `json:"host_id"`
	Name   string `json:"name,omitempty"`
	// Addresses are the host's mesh addresses ("ip:port"), to be tried in
	// order.
	Addresses []string `json:"addresses,omitempty"`
	// Reaches are the workloads (IDs, namespace/project/egg) of Streams,
	// sorted: what agents from before Streams check a stream against
	// (workload only). Newer agents go by Streams (see MayOpen).
	Reaches []string `json:"reaches,omitempty"`
	// Streams are what this peer may open mesh streams to, per workload
	// and port: what its own desired state serves (Service.StreamPorts),
	// sorted by workload. The mesh refuses any other stream, and closes an
	// open one whose workload or port leaves it.
	Streams []Reach `json:"streams,omitempty"`
}

// Reach is one workload a peer may open mesh streams to, and on which
// ports.
type Reach struct {
	Workload string `json:"workload"`
	// Ports are the streams' ports, sorted: 0 is an HTTP stream (the
	// peer's ingress routes the egg; the serving ingress holds each of its
	// requests to the egg's routes), n > 0 a TCP stream to port n inside a
	// replica (a published port's target, or the egg's port for the
	// peer's relays).
	Ports []int `json:"ports"`
}

// MayOpen reports whether the peer may open a mesh stream to the workload
// on port (0: an HTTP stream). A peer without Streams but with Reaches was
// written by a control plane from before ports: it is held to the workload
// alone, and the serving ingress still refuses a port that is not the
// egg's own (ingress.DialLocal).
func (p Peer) MayOpen(workload string, port int) bool {
	if len(p.Streams) == 0 {
		return slices.Contains(p.Reaches, workload)
	}
	for _, r := range p.Streams {
		if r.Workload == workload {
			return slices.Contains(r.Ports, port)
		}
	}
	return false
}

// VolumeSpec is a named volume kept on, or to be deleted from, this host.
type VolumeSpec struct {
	Namespace string `json:"namespace"`
	Project   string `json:"project"`
	// Name is the volume's name in the project file.
	Name string `json:"name"`
	// DockerName is the volume's name on the Docker host (see docker.VolumeName).
	DockerName string `json:"docker_name,omitempty"`
	// Delete marks the volume for deletion once no container uses it; a volume
	// without it is kept, whether or not a workload still mounts it.
	Delete bool `json:"delete,omitempty"`
	// Stale marks the copy a failover left on a host that was lost: the
	// volume now lives on another host, restored from a backup. A stale
	// copy is kept as it is (never mounted, never deleted unless Delete is
	// set too: hatch volume forget --stale-copy), for a user to take what
	// it holds that the backup did not.
	Stale *StaleCopy `json:"stale,omitempty"`
}

// StaleCopy is when and why a volume's copy became stale.
type StaleCopy struct {
	// Since is the failover's time; MovedTo the ID of the host the volume
	// was restored on.
	Since   time.Time `json:"since"`
	MovedTo string    `json:"moved_to"`
	// Found is when the host reported again after Since (zero: not yet).
	Found time.Time `json:"found,omitzero"`
}

// ComputeVersion returns the version of the state: the hash of its content
// (ContentVersion) combined with its peers' version (CombineVersions), so it
// changes when either does. It ignores the Version and peer fields
// themselves, the order of workloads, volumes, services, runs, peers and a
// peer's reaches, and secret values and registry passwords (a new value
// comes with a new handle, which is hashed).
func (d DesiredState) ComputeVersion() string {
	return CombineVersions(d.ContentVersion(), PeersVersion(d.Peers))
}

// ContentVersion returns the hash of the state without its peers: what the
// control plane stores for each host, the peers being stored once for all.
func (d DesiredState) ContentVersion() string {
	c := DesiredState{HostID: d.HostID, FenceAfter: d.FenceAfter}
	c.Workloads = make([]WorkloadSpec, len(d.Workloads))
	for i, w := range d.Workloads {
		w.Secrets = slices.Clone(w.Secrets)
		for j := range w.Secrets {
			w.Secrets[j].Value = ""
		}
		w.PullAuth = w.PullAuth.WithoutPassword()
		c.Workloads[i] = w
	}
	slices.SortStableFunc(c.Workloads, func(a, b WorkloadSpec) int { return strings.Compare(a.ID(), b.ID()) })
	c.Volumes = slices.Clone(d.Volumes)
	slices.SortStableFunc(c.Volumes, func(a, b VolumeSpec) int {
		return strings.Compare(a.Namespace+"/"+a.Project+"/"+a.Name, b.Namespace+"/"+b.Project+"/"+b.Name)
	})
	c.Services = slices.Clone(d.Services)
	slices.SortStableFunc(c.Services, func(a, b Service) int { return strings.Compare(a.ID(), b.ID()) })
	// A certificate's key changes only with its chain, which is hashed.
	c.Certificates = slices.Clone(d.Certificates)
	for i := range c.Certificates {
		c.Certificates[i].Key = ""
	}
	slices.SortStableFunc(c.Certificates, func(a, b Certificate) int { return strings.Compare(a.Host, b.Host) })
	c.Challenges = slices.Clone(d.Challenges)
	slices.SortStableFunc(c.Challenges, func(a, b Challenge) int { return strings.Compare(a.Token, b.Token) })
	c.Runs = make([]Run, len(d.Runs))
	for i, r := range d.Runs {
		r.Workload.Secrets = slices.Clone(r.Workload.Secrets)
		for j := range r.Workload.Secrets {
			r.Workload.Secrets[j].Value = ""
		}
		r.Workload.PullAuth = r.Workload.PullAuth.WithoutPassword()
		c.Runs[i] = r
	}
	slices.SortStableFunc(c.Runs, func(a, b Run) int { return strings.Compare(a.ID, b.ID) })
	c.VolumeTasks = slices.Clone(d.VolumeTasks)
	for i := range c.VolumeTasks {
		c.VolumeTasks[i].Key = "" // derived from the volume's name, which is hashed
	}
	slices.SortStableFunc(c.VolumeTasks, func(a, b VolumeTask) int { return strings.Compare(a.ID, b.ID) })
	return hashJSON(c)
}

// PeersVersion returns the hash of a peer list, ignoring the order of peers,
// of each one's reaches and streams, and of a stream's ports; "" for none.
func PeersVersion(peers []Peer) string {
	if len(peers) == 0 {
		return ""
	}
	c := make([]Peer, len(peers))
	for i, p := range peers {
		p.Reaches = slices.Sorted(slices.Values(p.Reaches))
		p.Streams = slices.Clone(p.Streams)
		for j, r := range p.Streams {
			p.Streams[j].Ports = slices.Sorted(slices.Values(r.Ports))
		}
		slices.SortStableFunc(p.Streams, func(a, b Reach) int { return strings.Compare(a.Workload, b.Workload) })
		c[i] = p
	}
	slices.SortStableFunc(c, func(a, b Peer) int { return strings.Compare(a.HostID, b.HostID) })
	return hashJSON(c)
}

// CombineVersions returns the version of a state whose content has version
// content and whose peers have version peers: content itself when there
// are no peers (as before peers existed), so the same content keeps its
// version.
func CombineVersions(content, peers string) string {
	if peers == "" {
		return content
	}
	return hashJSON([2]string{content, peers})
}

// Service returns the service with the workload ID, if the state lists it.
func (d DesiredState) Service(id string) (Service, bool) {
	for _, s := range d.Services {
		if s.ID() == id {
			return s, true
		}
	}
	return Service{}, false
}

// Peer returns the peer with the host ID, if the state lists it.
func (d DesiredState) Peer(hostID string) (Peer, bool) {
	for _, p := range d.Peers {
		if p.HostID == hostID {
			return p, true
		}
	}
	return Peer{}, false
}

// Seal sets Version to the hash of the content.
func (d *DesiredState) Seal() { d.Version = d.ComputeVersion() }

// Workload returns the workload with the given ID, if the state holds it.
func (d DesiredState) Workload(id string) (WorkloadSpec, bool) {
	for _, w := range d.Workloads {
		if w.ID() == id {
			return w, true
		}
	}
	return WorkloadSpec{}, false
}

// DecodeDesiredState reads a desired state from JSON, ignoring fields it does
// not know (a newer control plane may send more).
func DecodeDesiredState(r io.Reader) (DesiredState, error) {
	var d DesiredState
	if err := json.NewDecoder(r).Decode(&d); err != nil {
		return DesiredState{}, fmt.Errorf("decode desired state: %w", err)
	}
	return d, nil
}

// hashJSON hashes the JSON encoding of v. encoding/json writes struct fields in
// declaration order and map keys sorted, so equal values hash alike.
func hashJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		// Only unsupported types (channels, funcs) fail; the contract has none.
		panic(fmt.Sprintf("contract: hash %T: %v", v, err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// ContainerState is the life-cycle state of a container (or of a container
// about to exist), as the agent reports it.
type ContainerState string

const (
	// StateBuilding: the container's image is being pulled or built; the
	// container does not exist yet.
	StateBuilding ContainerState = "building"
	// StateStarting: created or (re)started, not yet running its process.
	StateStarting ContainerState = "starting"
	// StateRunning: its process runs (healthy or not: see Healthy).
	StateRunning ContainerState = "running"
	// StateDraining: being taken out of service (drain or stop in progress).
	StateDraining ContainerState = "draining"
	// StateStopped: not running, and not because its process exited by itself
	// (created but never started, or stopped from outside).
	StateStopped ContainerState = "stopped"
	// StateCompleted: its process exited with status 0.
	StateCompleted ContainerState = "completed"
	// StateCrashed: its process exited with a non-zero status, or died.
	StateCrashed ContainerState = "crashed"
	// StateUnknown: anything else (paused, or a state this agent does not know).
	StateUnknown ContainerState = "unknown"
)

// Exited reports whether the state is one in which the container's process is
// not running and nothing is in progress for it.
func (s ContainerState) Exited() bool {
	return s == StateStopped || s == StateCompleted || s == StateCrashed
}

// StatusReport is what an agent tells the control plane about its host.
type StatusReport struct {
	HostID string `json:"host_id"`
	// Version is the desired-state version the agent last converged towards.
	Version    string            `json:"version,omitempty"`
	Time       time.Time         `json:"time"`
	Containers []ContainerStatus `json:"containers,omitempty"`
	// Errors are the last converge's errors, one line each.
	Errors []string `json:"errors,omitempty"`
	// Capacity is what the host offers containers, for the scheduler; nil
	// when the agent could not tell.
	Capacity *HostCapacity `json:"capacity,omitempty"`
	// MeshAddresses are where the host's mesh port is reached ("ip:port"),
	// in the order peers should try them (--advertise); the control plane
	// passes them on in every host's Peers.
	MeshAddresses []string `json:"mesh_addresses,omitempty"`
	// Challenges are the tokens of the desired state's ACME challenges
	// that the host's ingress answers now.
	Challenges []string `json:"challenges,omitempty"`
	// HTTPPort and HTTPSPort are where the host's ingress listens (0:
	// not at all, or an agent that does not say): the plan warns when a
	// route with an ACME certificate lands on hosts not on 80 and 443.
	HTTPPort  int `json:"http_port,omitempty"`
	HTTPSPort int `json:"https_port,omitempty"`
	// NoExec: the agent runs with --no-exec and refuses every exec
	// session; the control plane refuses `hatch exec` there first, so the
	// event log never records an exec that did not run.
	NoExec bool `json:"no_exec,omitempty"`
	// Engine is set while the host's Docker Engine does not answer the
	// agent: the containers above are then the last ones it listed, and
	// none of them can be taken as ready.
	Engine *EngineProblem `json:"engine,omitempty"`
	// Runs is the state of every run of the desired state the agent
	// converged towards.
	Runs []RunStatus `json:"runs,omitempty"`
	// VolumeTasks is the state of every volume task of the desired state
	// the agent converged towards.
	VolumeTasks []VolumeTaskStatus `json:"volume_tasks,omitempty"`
	// FencedAt is when the agent stopped its Fenced workloads because no
	// status report had been answered for FenceAfter; it is carried until
	// a report is answered again, so the first report a server hears after
	// a fence tells it (event host.fenced).
	FencedAt time.Time `json:"fenced_at,omitzero"`
}

// EngineProblem is a Docker Engine that stopped answering its agent in
// time (frozen, overloaded, or gone).
type EngineProblem struct {
	// Since is when the first call that went unanswered was made.
	Since time.Time `json:"since"`
	// Reason is that call's error.
	Reason string `json:"reason"`
}

// HostCapacity is a host's total memory and CPU, as its Docker Engine reports.
type HostCapacity struct {
	MemoryBytes int64 `json:"memory_bytes"`
	// MilliCPU is thousandths of a CPU: 2 cores are 2000.
	MilliCPU int64 `json:"milli_cpu"`
}

// ContainerStatus is one container (or slot being built) in a status report.
type ContainerStatus struct {
	WorkloadID  string         `json:"workload"`
	Slot        int            `json:"slot"`
	ContainerID string         `json:"container_id,omitempty"`
	SpecHash    string         `json:"spec_hash,omitempty"`
	State       ContainerState `json:"state"`
	Healthy     bool           `json:"healthy"`
	// Restarts counts the agent's in-place restarts since the container was
	// last healthy for long enough to reset its back-off.
	Restarts int `json:"restarts,omitempty"`
	// CrashLoopUntil is set while the container is crash-looping: the agent
	// will not restart it before then.
	CrashLoopUntil time.Time `json:"crash_loop_until,omitzero"`
	// RolloutFailure says why the rollout of this container's workload to its
	// spec hash failed, if it did.
	RolloutFailure string `json:"rollout_failure,omitempty"`
	// FailedPull is set on the entry of a workload whose image the
	// registry refused (no container, slot 0, at the spec it failed): the
	// PullLogin the pull used. See WorkloadSpec.Current.
	FailedPull string `json:"failed_pull,omitempty"`
	// LogTail holds the last lines of the container's log when it failed.
	LogTail []string `json:"log_tail,omitempty"`
}

// DecodeStatusReport reads a status report from JSON, ignoring unknown fields.
func DecodeStatusReport(r io.Reader) (StatusReport, error) {
	var s StatusReport
	if err := json.NewDecoder(r).Decode(&s); err != nil {
		return StatusReport{}, fmt.Errorf("decode status report: %w", err)
	}
	return s, nil
}
