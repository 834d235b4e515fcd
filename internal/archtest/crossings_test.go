package archtest

import (
	"slices"
	"strings"
	"testing"
)

const table = `
| package | job | does I/O? |
|---|---|---|
| **commands** | | |
| ` + "`internal/cli`" + ` | commands | – |
| ` + "`internal/client`" + ` | the API client | HTTPS |
| **control plane** | | |
| ` + "`internal/store`, `.../sqlite`" + ` | the stores | the database |
| **agent** | | |
| ` + "`internal/agent`" + ` | the agent | files |
| **shared** | | |
| ` + "`internal/contract`" + ` | wire types | no |
| **tests and examples** | | |
| ` + "`test/e2e`" + ` | scenarios | Docker |

## Data flow
| ` + "`internal/later`" + ` | not in the table | no |
`

func TestReadLayersPlacesSubPackagesWithTheirParent(t *testing.T) {
	l, err := readLayers(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	for pkg, want := range map[string]string{
		"internal/cli": "commands", "internal/store/sqlite": "control plane", "internal/store/sqlstore": "control plane",
		"internal/agent": "agent", "internal/contract": "shared", "test/e2e": "tests and examples",
	} {
		if got, _ := l.groupOf(pkg); got != want {
			t.Errorf("%s is in group %q, want %q", pkg, got, want)
		}
	}
	if g, ok := l.groupOf("internal/later"); ok {
		t.Errorf("a row after the table placed internal/later in %q", g)
	}
}

func TestCrossingsNameTheImportAndTheRule(t *testing.T) {
	l, err := readLayers(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	got := crossings(l, []pkg{
		{path: "internal/cli", imports: []string{"internal/store", "internal/agent", "internal/contract"}},
		{path: "internal/agent", imports: []string{"internal/store/sqlite", "internal/contract", "internal/client"}},
		{path: "internal/contract", imports: []string{"internal/cli"}},
		{path: "test/e2e", imports: []string{"internal/cli", "internal/agent"}},
		{path: "internal/newpkg"},
	}, map[[2]string]string{{"internal/agent", "internal/client"}: "allowed for now"})
	want := []string{
		"internal/agent (agent) imports internal/store/sqlite (control plane): agent packages may import only agent, shared (the layers of " + doc + ")",
		"internal/contract (shared) imports internal/cli (commands): shared packages may import only shared (the layers of " + doc + ")",
		"internal/newpkg is in no group of the package table in " + doc + ": add its row",
	}
	if !slices.Equal(got, want) {
		t.Errorf("crossings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestAnAllowedCrossingNoLongerMadeFails(t *testing.T) {
	l, err := readLayers(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[[2]string]string{{"internal/agent", "internal/client"}: "until the agent's client moves"}
	got := crossings(l, []pkg{{path: "internal/agent", imports: []string{"internal/contract"}}}, allowed)
	if len(got) != 1 || !strings.Contains(got[0], "internal/agent's import of internal/client no longer crosses the layers: remove the allowed crossing") {
		t.Errorf("crossings %q, want the stale allowed crossing named", got)
	}
}
