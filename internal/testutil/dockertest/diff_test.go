package dockertest

import (
	"strings"
	"testing"
)

func baseSnapshot() Snapshot {
	return Snapshot{
		Containers: map[string]ContainerState{"c1": {
			Exists: true, Name: "/foreign", Status: "running", StartedAt: "t0",
			Labels: map[string]string{"a": "b"}, Networks: []string{"n"}, Mounts: []string{"v:/data"},
		}},
		Networks: map[string]NetworkState{"n1": {Exists: true, Name: "n", Created: "t0", Labels: map[string]string{"a": "b"}, Containers: []string{"c1"}}},
		Volumes:  map[string]VolumeState{"v": {Exists: true, CreatedAt: "t0", Labels: map[string]string{"a": "b"}}},
	}
}

func TestDiffReportsEveryKindOfChange(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Snapshot)
		want   string
	}{
		{"nothing changed", func(*Snapshot) {}, ""},
		{"container removed", func(s *Snapshot) { s.Containers["c1"] = ContainerState{} }, "container /foreign: removed"},
		{"container stopped", func(s *Snapshot) { c := s.Containers["c1"]; c.Status = "exited"; s.Containers["c1"] = c }, "exited, was running"},
		{"container restarted", func(s *Snapshot) { c := s.Containers["c1"]; c.StartedAt = "t1"; s.Containers["c1"] = c }, "restarted"},
		{"container renamed", func(s *Snapshot) { c := s.Containers["c1"]; c.Name = "/x"; s.Containers["c1"] = c }, "renamed to /x"},
		{"container relabelled", func(s *Snapshot) {
			c := s.Containers["c1"]
			c.Labels = map[string]string{"a": "c"}
			s.Containers["c1"] = c
		}, "labels"},
		{"container disconnected", func(s *Snapshot) { c := s.Containers["c1"]; c.Networks = nil; s.Containers["c1"] = c }, "on networks"},
		{"container remounted", func(s *Snapshot) { c := s.Containers["c1"]; c.Mounts = nil; s.Containers["c1"] = c }, "mounts"},
		{"network removed", func(s *Snapshot) { s.Networks["n1"] = NetworkState{} }, "network n: removed"},
		{"network re-created", func(s *Snapshot) { n := s.Networks["n1"]; n.Created = "t1"; s.Networks["n1"] = n }, "network n: re-created"},
		{"network gained a container", func(s *Snapshot) {
			n := s.Networks["n1"]
			n.Containers = []string{"c1", "c2"}
			s.Networks["n1"] = n
		}, "containers 2, were 1"},
		{"volume removed", func(s *Snapshot) { s.Volumes["v"] = VolumeState{} }, "volume v: removed"},
		{"volume re-created", func(s *Snapshot) {
			s.Volumes["v"] = VolumeState{Exists: true, CreatedAt: "t1", Labels: map[string]string{"a": "b"}}
		}, "volume v: re-created"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			after := baseSnapshot()
			tt.change(&after)
			got := strings.Join(Diff(baseSnapshot(), after), "\n")
			if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
				t.Fatalf("Diff = %q, want it to mention %q", got, tt.want)
			}
		})
	}
}

func TestDockerfileCarriesEnvHealthcheckAndEntrypoint(t *testing.T) {
	got := ImageSpec{
		Env:         map[string]string{"B": "two words", "A": "1"},
		Healthcheck: &Healthcheck{Cmd: []string{"/app", "-check"}, Interval: 1e9, Retries: 2},
	}.Dockerfile()
	want := "FROM scratch\nCOPY app /app\nENV A=\"1\"\nENV B=\"two words\"\n" +
		"HEALTHCHECK --interval=1s --retries=2 CMD [\"/app\",\"-check\"]\nENTRYPOINT [\"/app\"]\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

func TestBuildContextIsReproducible(t *testing.T) {
	a, err := BuildContext(ImageSpec{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := BuildContext(ImageSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Fatal("two build contexts of the same spec differ: a blob digest would change on every upload")
	}
	c, _ := BuildContext(ImageSpec{Env: map[string]string{"X": "1"}})
	if string(a) == string(c) {
		t.Fatal("a different spec gave the same context")
	}
}
