package spec

import (
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

func TestParseReadsAFailoverAndFencesTheEggsMountingIt(t *testing.T) {
	src := "project: shop\neggs:\n  db:\n    image: postgres:16\n    volumes: [\"data:/data\"]\n" +
		"  web:\n    image: nginx\n    volumes: [\"cache:/cache\"]\nvolumes:\n  data:\n    backup: {}\n    failover: {after: 3m}\n  cache: {}\n"
	p, err := parse(src)
	if err != nil {
		t.Fatal(err)
	}
	rs, _ := p.Resources()
	vol := find(t, rs, resource.Volume, "data")
	in, err := inputs.Decode[inputs.Volume](vol.Inputs)
	if err != nil {
		t.Fatal(err)
	}
	if in.Failover == nil || in.Failover.After != "3m" {
		t.Fatalf("volume inputs' failover %+v, want after 3m", in.Failover)
	}
	if err := CheckResource(vol, Limits{}); err != nil {
		t.Fatalf("the loader's own volume is refused by CheckResource: %v", err)
	}
	db, err := inputs.Decode[inputs.Egg](find(t, rs, resource.Egg, "db").Inputs)
	if err != nil {
		t.Fatal(err)
	}
	if len(db.Volumes) != 1 || !db.Volumes[0].Fenced {
		t.Errorf("db's mounts %+v: want data fenced", db.Volumes)
	}
	web, err := inputs.Decode[inputs.Egg](find(t, rs, resource.Egg, "web").Inputs)
	if err != nil {
		t.Fatal(err)
	}
	if web.Volumes[0].Fenced {
		t.Errorf("web mounts no failover volume, yet is fenced: %+v", web.Volumes)
	}
}

func TestParseRefusesBadFailoversAtTheirLineWithTheirPath(t *testing.T) {
	head := "project: shop\neggs:\n  db:\n    image: postgres:16\n    volumes: [\"data:/data\"]\nvolumes:\n  data:\n"
	for _, tt := range []struct{ name, src, want string }{
		{"no backup", head + "    failover: {after: 3m}\n", "hatch.yaml:8: volumes.data.failover: a volume fails over by restoring its last backup"},
		{"bad duration", head + "    backup: {}\n    failover:\n      after: soon\n", "hatch.yaml:10: volumes.data.failover.after: \"soon\" is not a duration"},
		{"zero", head + "    backup: {}\n    failover:\n      after: 0s\n", "hatch.yaml:10: volumes.data.failover.after: must be positive"},
		{"missing after", head + "    backup: {}\n    failover: {}\n", "hatch.yaml:9: volumes.data.failover.after: is missing"},
		{"two volumes", strings.Replace(head, `["data:/data"]`, `["data:/data", "logs:/logs"]`, 1) + "    backup: {}\n    failover: {after: 3m}\n  logs:\n",
			`hatch.yaml:9: volumes.data.failover: egg "db" mounts 2 volumes`},
	} {
		_, err := parse(tt.src)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want it to contain %q", tt.name, err, tt.want)
		}
	}
}

func TestCheckResourceRefusesAFailoverWithoutBackup(t *testing.T) {
	vol := &resource.Desired{Type: resource.Volume, Name: "data", Inputs: inputs.Encode(inputs.Volume{
		Labels: map[string]string{}, Egg: "db", Placement: inputs.Placement{Hosts: []string{}},
		Failover: &inputs.VolumeFailover{After: "-1m"}})}
	err := CheckResource(vol, Limits{})
	if err == nil || !strings.Contains(err.Error(), "inputs.failover") || !strings.Contains(err.Error(), "inputs.failover.after") {
		t.Fatalf("CheckResource = %v, want inputs.failover (no backup) and inputs.failover.after (negative)", err)
	}
}
