package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

// housekeepingDocker is a containers.Client with the housekeeper's
// capability, recording what it is asked to remove and keep, and failing
// volume removal with volumesErr.
type housekeepingDocker struct {
	containers.Client
	volumesErr error

	mu      sync.Mutex // guards volumes and keep
	volumes [][]contract.VolumeSpec
	keep    [][]string
}

var _ housekeeper = (*housekeepingDocker)(nil)

func (d *housekeepingDocker) RemoveVolumes(_ context.Context, vols []contract.VolumeSpec) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.volumes = append(d.volumes, slices.Clone(vols))
	return d.volumesErr
}

func (d *housekeepingDocker) PruneNetworks(_ context.Context, keep []string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.keep = append(d.keep, slices.Clone(keep))
	return nil
}

// last returns the last housekeeping's volumes and kept networks.
func (d *housekeepingDocker) last() ([]contract.VolumeSpec, []string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.volumes) == 0 || len(d.keep) == 0 {
		return nil, nil, errors.New("no housekeeping yet")
	}
	return d.volumes[len(d.volumes)-1], d.keep[len(d.keep)-1], nil
}

// shopState is two workloads sharing a network, one volume to delete and
// one to keep.
func shopState() contract.DesiredState {
	w, api := web(1), web(1)
	api.Egg = "api"
	w.Networks = []string{"hatch-default-shop-front", "hatch-default-shop-back"}
	api.Networks = []string{"hatch-default-shop-back"}
	d := contract.DesiredState{HostID: testHost, Workloads: []contract.WorkloadSpec{w, api}, Volumes: []contract.VolumeSpec{
		{Namespace: "default", Project: "shop", Name: "old", DockerName: "hatch-default-shop-old", Delete: true},
		{Namespace: "default", Project: "shop", Name: "data", DockerName: "hatch-default-shop-data"},
	}}
	d.Seal()
	return d
}

// A converge hands the Docker adapter the desired state's volumes (it
// deletes those marked, once unused) and the networks to keep, each once:
// every network a desired workload uses, the others pruned.
func TestAConvergeDeletesMarkedVolumesAndPrunesUnusedNetworks(t *testing.T) {
	cp := newFakeControlPlane()
	desired := shopState()
	cp.set(desired)
	dc := &housekeepingDocker{Client: newFake(t)}
	startAgent(t, testConfig(t, dc, cp, t.TempDir()))
	eventually(t, "housekeeping", func() error {
		vols, keep, err := dc.last()
		if err != nil {
			return err
		}
		if !slices.Equal(vols, desired.Volumes) {
			return fmt.Errorf("volumes %+v, want the desired state's %+v", vols, desired.Volumes)
		}
		if want := []string{"hatch-default-shop-back", "hatch-default-shop-front"}; !slices.Equal(keep, want) {
			return fmt.Errorf("networks kept %v, want %v", keep, want)
		}
		return nil
	})
}

// A volume that cannot be removed is reported, and the networks are still
// pruned.
func TestAFailedVolumeDeletionIsReportedAndNetworksStillPruned(t *testing.T) {
	cp := newFakeControlPlane()
	cp.set(shopState())
	dc := &housekeepingDocker{Client: newFake(t), volumesErr: errors.New("remove volume hatch-default-shop-old: volume is in use")}
	startAgent(t, testConfig(t, dc, cp, t.TempDir()))
	eventually(t, "the failed deletion reported", func() error {
		rep, _ := cp.lastReport()
		if !slices.ContainsFunc(rep.Errors, func(e string) bool { return strings.Contains(e, "volume is in use") }) {
			return fmt.Errorf("report errors %q", rep.Errors)
		}
		if _, keep, err := dc.last(); err != nil || len(keep) != 2 {
			return fmt.Errorf("networks kept %v (%v), want the pruning done all the same", keep, err)
		}
		return nil
	})
}
