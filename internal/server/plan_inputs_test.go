package server

import (
	"net/http"
	"strings"
	"testing"
)

// TestPlanRefusesInputsTheLoaderWouldRefuse sends the API what the CLI's
// checks would have stopped: the server checks them itself, with a 400
// naming the field, before anything is planned or stored.
func TestPlanRefusesInputsTheLoaderWouldRefuse(t *testing.T) {
	h := newApplyHarness(t, applyOptions{})
	h.report("h1")
	const p = "/api/v1/projects/default/shop/plan"
	egg := func(name, inputs string) string {
		return `{"resources":[{"type":"egg","name":"` + name + `","inputs":` + inputs + `}]}`
	}
	for _, c := range []struct{ name, body, mentions string }{
		{"a slash in a name", egg("x/../../../../tmp/escaped/", `{"image":"x"}`), `name: egg name "x/../../../../tmp/escaped/"`},
		{"a dot-dot name", egg("..", `{"image":"x"}`), "name: egg name"},
		{"invalid UTF-8 in a name", egg("w\xff", `{"image":"x"}`), "name: egg name"},
		{"a port out of range", egg("w", `{"image":"x","port":99999999}`), "inputs.port: port 99999999"},
		{"a published port out of range", egg("w", `{"image":"x","ports":[{"published":0,"target":80}]}`), "inputs.ports[0].published"},
		{"a billion replicas", egg("w", `{"image":"x","replicas":1000000000}`), "inputs.replicas: "},
		{"one replica above the limit", egg("w", `{"image":"x","replicas":1001}`), "inputs.replicas: "},
		{"negative replicas", egg("w", `{"image":"x","replicas":-1}`), "inputs.replicas: "},
		{"an image with a space", egg("w", `{"image":"a b"}`), "inputs.image"},
		{"neither image nor build", egg("w", `{}`), "inputs.image"},
		{"a relative mount target", egg("w", `{"image":"x","volumes":[{"type":"bind","source":"/srv","target":"data"}]}`), "inputs.volumes[0].target"},
		{"an unknown stop signal", egg("w", `{"image":"x","stop_signal":"SIGFOO"}`), "inputs.stop_signal"},
		{"a bad duration", egg("w", `{"image":"x","stop_timeout":"soon"}`), "inputs.stop_timeout"},
		{"a reserved name", egg("volume", `{"image":"x"}`), "reserved"},
		{"a bad volume name", `{"resources":[{"type":"volume","name":"../v","inputs":{}}]}`, "name: volume name"},
		{"a route whose name is not its host", `{"resources":[{"type":"route","name":"a.localhost","inputs":{"host":"b.localhost","path":"/","egg":"w","port":80}}]}`, "name: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantError(t, h.do("POST", p, strings.NewReader(c.body)), http.StatusBadRequest, "bad_request", c.mentions)
		})
	}
	if ps, err := h.store.ListProjects(t.Context()); err != nil || len(ps) != 0 {
		t.Fatalf("projects after refused plans: %v, %v", ps, err)
	}
}

// TestBadInputTypesAre400s: inputs of the wrong shape are the caller's
// mistake, answered 400 with the field, never 500.
func TestBadInputTypesAre400s(t *testing.T) {
	h := newApplyHarness(t, applyOptions{})
	const p = "/api/v1/projects/default/shop/plan"
	res := func(typ, inputs string) string {
		return `{"resources":[{"type":"` + typ + `","name":"w","inputs":` + inputs + `}]}`
	}
	for _, c := range []struct{ body, mentions string }{
		{res("egg", `{"image":5}`), "inputs.image: want a string"},
		{res("egg", `{"image":"x","volumes":["a"]}`), "inputs.volumes: want an object"},
		{res("egg", `{"image":"x","replicas":"3"}`), "inputs.replicas: want a number"},
		{res("egg", `{"image":"x","replicas":1.5}`), "inputs.replicas: want a number"},
		{res("egg", `{"image":"x","bogus":1}`), `inputs: unknown field "bogus"`},
		{res("egg", `{"image":"x","env":{"A":{"b":1}}}`), "inputs.env"},
		{res("egg", `{"image":"x","health":{"cmd":"true"}}`), "inputs.health.cmd: want a list"},
		{res("volume", `{"labels":5}`), "inputs.labels: want an object"},
		{res("network", `{"internal":"yes"}`), "inputs.internal: want true or false"},
		{res("route", `{"port":"80"}`), "inputs.port: want a number"},
		{res("secret", `{"file":["a"]}`), "inputs.file: want a string"},
	} {
		t.Run(c.body, func(t *testing.T) {
			wantError(t, h.do("POST", p, strings.NewReader(c.body)), http.StatusBadRequest, "bad_request", c.mentions)
		})
	}
}

// TestMaxReplicasIsTheServers: the limit on replicas per egg is the
// server's setting (hatch server --max-replicas), up to the file's own.
func TestMaxReplicasIsTheServers(t *testing.T) {
	h := newApplyHarness(t, applyOptions{maxReplicas: 2000})
	h.report("h1")
	const p = "/api/v1/projects/default/shop/plan"
	body := func(n string) string {
		return `{"resources":[{"type":"egg","name":"w","inputs":{"image":"x","replicas":` + n + `}}]}`
	}
	decode[map[string]any](t, h.do("POST", p, strings.NewReader(body("2000"))), http.StatusCreated)
	wantError(t, h.do("POST", p, strings.NewReader(body("2001"))), http.StatusBadRequest, "bad_request", "0 to 2000 per egg")
}
