package deploy

import (
	"slices"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/resource"
)

func TestImageMovesNoteAMovedTagAndAFirstPinOnly(t *testing.T) {
	ab, cd := "sha256:"+strings.Repeat("ab", 32), "sha256:"+strings.Repeat("cd", 32)
	egg := func(name, image, pull, digest string) map[string]any {
		in := map[string]any{"image": image}
		if pull != "" {
			in["pull"] = pull
		}
		if digest != "" {
			in["digest"] = digest
		}
		return in
	}
	deployed := []*resource.Deployed{
		{Type: resource.Egg, Name: "moved", Inputs: egg("moved", "ghcr.io/acme/web:main", "", ab)},
		{Type: resource.Egg, Name: "upgraded", Inputs: egg("upgraded", "ghcr.io/acme/api:main", "", "")},
		{Type: resource.Egg, Name: "retagged", Inputs: egg("retagged", "ghcr.io/acme/web:1", "", ab)},
		{Type: resource.Egg, Name: "repolicied", Inputs: egg("repolicied", "ghcr.io/acme/web:main", "missing", "")},
		{Type: resource.Egg, Name: "same", Inputs: egg("same", "ghcr.io/acme/web:main", "", ab)},
	}
	desired := []api.DesiredResource{
		{Type: resource.Egg, Name: "moved", Inputs: egg("moved", "ghcr.io/acme/web:main", "", cd)},
		{Type: resource.Egg, Name: "upgraded", Inputs: egg("upgraded", "ghcr.io/acme/api:main", "", cd)},
		{Type: resource.Egg, Name: "retagged", Inputs: egg("retagged", "ghcr.io/acme/web:2", "", cd)},
		{Type: resource.Egg, Name: "repolicied", Inputs: egg("repolicied", "ghcr.io/acme/web:main", "", cd)},
		{Type: resource.Egg, Name: "same", Inputs: egg("same", "ghcr.io/acme/web:main", "", ab)},
		{Type: resource.Egg, Name: "new", Inputs: egg("new", "ghcr.io/acme/web:main", "", cd)},
	}
	want := []string{
		"moved: image ghcr.io/acme/web:main moved sha256:abababababab… → sha256:cdcdcdcdcdcd…",
		"upgraded: image ghcr.io/acme/api:main pinned to sha256:cdcdcdcdcdcd… (its containers roll once)",
	}
	if got := imageMoves(deployed, desired); !slices.Equal(got, want) {
		t.Fatalf("notes %q, want %q", got, want)
	}
}
