package server

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/blob"
	"github.com/hatchery/hatchery/internal/deploy"
	"github.com/hatchery/hatchery/internal/desired"
	"github.com/hatchery/hatchery/internal/fleet"
	"github.com/hatchery/hatchery/internal/imageref/imagereftest"
	"github.com/hatchery/hatchery/internal/jobs"
	"github.com/hatchery/hatchery/internal/leader"
	"github.com/hatchery/hatchery/internal/notify"
	"github.com/hatchery/hatchery/internal/pki/authority"
	"github.com/hatchery/hatchery/internal/provider"
	"github.com/hatchery/hatchery/internal/seal"
	"github.com/hatchery/hatchery/internal/store/sqlite"
	"github.com/hatchery/hatchery/internal/volumes"
)

// TestWiring is what a test builds a server over: a real SQLite store and
// blob directory, and the services over them, as `hatch server` wires them.
// Zero fields take a test's defaults. It is exported for the tests of
// package server_test too.
type TestWiring struct {
	// Dir holds the store and the blobs ("" for a new temporary one); a
	// Store already open is used as it is.
	Dir   string
	Store *sqlite.Store
	Box   *seal.Box
	// Auth defaults to the admin token AdminHash.
	Auth        Authenticator
	AdminHash   string
	Fingerprint string
	ServerID    string
	Logger      *zap.Logger
	Now         func() time.Time
	Deploy      deploy.Config
	Fleet       fleet.Config
	// LoopsLease is the term of the background loops' lease (default
	// leader.DefaultTTL).
	LoopsLease time.Duration
	// ServerURLs are the live servers every desired-state answer names
	// (none by default), unless Servers is set.
	ServerURLs []string
	Servers    ServerList
	// TLS lists the certificates of HTTPS routes (none by default).
	TLS CertificateLister
	// Notify, if set, runs the webhooks with these settings, over the
	// store and the deploy service's project targets.
	Notify *notify.Config
	// BackupKey is the cluster's backup key (32 bytes of 7 by default).
	BackupKey []byte
	// Images resolves image tags at plan (a new imagereftest.Fake by
	// default, which Built.Images holds).
	Images deploy.ImageResolver
}

// staticServers is a server list that never changes.
type staticServers []string

func (s staticServers) Servers() ([]string, <-chan struct{}) { return s, nil }

// Built is a test server and what it was built over.
type Built struct {
	Server *Server
	Store  *sqlite.Store
	Blobs  *blob.Store
	Box    *seal.Box
	Fleet  *fleet.Service
	Deploy *deploy.Service
	Jobs   *jobs.Service
	// Backups are volume backups, over BackupKey and the blob store.
	Backups   *volumes.Service
	BackupKey []byte
	// HostCA signs the hosts' certificates.
	HostCA *authority.HostCA
	// Providers are the deploy service's, for tests that drive the
	// reconciler themselves.
	Providers *provider.Set
	// Notify delivers the webhooks (nil without TestWiring.Notify).
	Notify *notify.Service
	// Images is TestWiring.Images.
	Images deploy.ImageResolver
}

// BuildTestServer builds a server over w; the store is closed in t.Cleanup
// when BuildTestServer opened it, and the server is closed there too.
func BuildTestServer(t testing.TB, cfg Config, w TestWiring) Built {
	t.Helper()
	if w.Dir == "" {
		w.Dir = t.TempDir()
	}
	if w.Logger == nil {
		w.Logger = zap.NewNop()
	}
	if w.Now == nil {
		w.Now = time.Now
	}
	if w.Fingerprint == "" {
		w.Fingerprint = fingerprint()
	}
	if w.ServerID == "" {
		w.ServerID = "srv-test"
	}
	if w.Deploy.PlanTTL == 0 {
		w.Deploy = deploy.DefaultConfig()
	}
	if w.LoopsLease == 0 {
		w.LoopsLease = leader.DefaultTTL
	}
	if w.Fleet.LivenessTimeout == 0 {
		w.Fleet = fleet.DefaultConfig()
	}
	st := w.Store
	if st == nil {
		var err error
		if st, err = sqlite.Open(t.Context(), filepath.Join(w.Dir, "hatch.db"), w.Logger); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
	}
	blobs, err := blob.Open(filepath.Join(w.Dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	if w.Box == nil {
		if w.Box, err = seal.New(bytes.Repeat([]byte{1}, 32)); err != nil {
			t.Fatal(err)
		}
	}
	if w.Auth == nil {
		w.Auth = NewAdminToken(w.AdminHash)
	}
	set, err := provider.New(provider.Deps{Deps: desired.Deps{Desired: st, Statuses: st, Records: st, Events: st, Secrets: st,
		Fleet: desired.StoreFleet{List: st, Identities: st, Reports: st, Capacities: st, MaxCapacity: w.Fleet.MaxHostCapacity,
			LoopbackMesh: w.Fleet.LoopbackMesh},
		Box: w.Box, Logger: w.Logger, Now: w.Now}})
	if err != nil {
		t.Fatal(err)
	}
	if w.Images == nil {
		w.Images = imagereftest.New()
	}
	if w.BackupKey == nil {
		w.BackupKey = bytes.Repeat([]byte{7}, 32)
	}
	backups, err := volumes.New(volumes.DefaultConfig(), volumes.Deps{Tasks: st, Leases: st, Events: st, Retention: st,
		Records: st, Hosts: st, Desired: set.States, Store: &volumes.BlobStore{Blobs: blobs, Tasks: st}, ClusterKey: w.BackupKey,
		ServerID: w.ServerID, Logger: w.Logger, Now: w.Now})
	if err != nil {
		t.Fatal(err)
	}
	runs, err := jobs.New(jobs.DefaultConfig(), jobs.Deps{Runs: st, Schedules: st, Leases: st, Events: st, Records: st,
		Hosts: st, Desired: set.States, Sources: []jobs.Source{jobs.EggSchedules{Projects: st}, backups},
		ServerID: w.ServerID, Logger: w.Logger, Now: w.Now})
	if err != nil {
		t.Fatal(err)
	}
	dep, err := deploy.New(w.Deploy, deploy.Deps{Resources: st, Plans: st, Leases: st, Applies: st, Projects: st,
		Events: st, Reports: st, Sources: blobs, Providers: set, Images: w.Images, ServerID: w.ServerID, Logger: w.Logger, Now: w.Now,
		Loops: []deploy.Loop{runs, backups}})
	if err != nil {
		t.Fatal(err)
	}
	hostCA, err := authority.LoadOrCreateHostCA(filepath.Join(w.Dir, "tls"), authority.MaxHostLifetime, w.Now())
	if err != nil {
		t.Fatal(err)
	}
	fl, err := fleet.New(w.Fleet, fleet.Deps{Liveness: st, Statuses: st, Desired: st, Events: st, Retention: st,
		Applies: st, Projects: st, JoinTokens: st, Members: st, AdminTokens: st, Capacities: st, Blobs: blobs, Fingerprint: w.Fingerprint,
		HostCA: hostCA, Peers: set, Registries: set, Logger: w.Logger, Now: w.Now})
	if err != nil {
		t.Fatal(err)
	}
	loops, err := leader.New(w.LoopsLease, leader.Deps{Leases: st, ServerID: w.ServerID, Logger: w.Logger})
	if err != nil {
		t.Fatal(err)
	}
	var servers ServerList = staticServers(w.ServerURLs)
	if w.Servers != nil {
		servers = w.Servers
	}
	var notifications *notify.Service
	deps := Deps{Deploy: dep, Fleet: fl, Jobs: runs, Backups: backups, Loops: loops, Desired: st, Box: w.Box, Blobs: blobs, Auth: w.Auth,
		Servers: servers, TLS: w.TLS, Logger: w.Logger, Now: w.Now}
	if w.Notify != nil {
		if notifications, err = notify.New(*w.Notify, notify.Deps{Events: st, Cursor: st, Projects: dep, Logger: w.Logger, Now: w.Now}); err != nil {
			t.Fatal(err)
		}
		deps.Notifications = notifications
	}
	srv, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return Built{Server: srv, Store: st, Blobs: blobs, Box: w.Box, Fleet: fl, Deploy: dep, Jobs: runs, Backups: backups, BackupKey: w.BackupKey, Providers: set, HostCA: hostCA, Notify: notifications, Images: w.Images}
}
