package server

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/imageref"
	"github.com/hatchery/hatchery/internal/imageref/imagereftest"
)

const digestImage = "registry.example:5000/acme/web:main"

// digestYAML is web from a tag of a private registry, with the project's
// login, and the pull policy given ("" for the default).
func digestYAML(pull string) string {
	y := `project: shop
secrets:
  reg_pass: {env: REG_PASS}
registries:
  "registry.example:5000": {username: ci, password: "${secret.reg_pass}"}
eggs:
  web:
    image: ` + digestImage + "\n"
	if pull != "" {
		y += "    pull: " + pull + "\n"
	}
	return y
}

// webImage is the image web's workload on h1 runs, and its pull policy.
func (h *applyHarness) webImage() (string, contract.PullPolicy) {
	h.t.Helper()
	w, ok := h.desired("h1").Workload("default/shop/web")
	if !ok {
		h.t.Fatal("h1 runs no web")
	}
	return w.Image, w.Pull
}

func pinned(t *testing.T, digest string) string {
	t.Helper()
	p, err := contract.PinImage(digestImage, digest)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The plan resolves web's tag to a digest with the project's login and the
// hosts run that digest; a moved tag is an update that says so, and rolls
// to the new digest; a rollback runs the old digest again without asking
// the registry, though the tag has moved.
func TestThePlanPinsEachImageToItsDigestAndARollbackBringsTheOldDigestBack(t *testing.T) {
	images := imagereftest.New()
	h := newApplyHarness(t, applyOptions{images: images})
	h.report("h1")
	secrets := map[string]string{"reg_pass": "pw-1"}
	first := images.Move(digestImage, "v1")
	wantSucceeded(t, h.applyAndWait("default/shop", digestYAML(""), secrets))
	if img, pull := h.webImage(); img != pinned(t, first) || pull != "" {
		t.Fatalf("web runs %s (pull %q), want %s", img, pull, pinned(t, first))
	}
	calls := images.Calls()
	if len(calls) != 1 || calls[0].Image != digestImage || calls[0].Login == nil ||
		*calls[0].Login != (imageref.Login{Username: "ci", Password: "pw-1"}) {
		t.Fatalf("the registry was asked %+v, want once for %s with the project's login", calls, digestImage)
	}

	// Planned again, unchanged: nothing to do.
	if p := h.plan("default/shop", digestYAML(""), secrets); p.HasChanges {
		t.Fatalf("an unchanged tag planned %+v, want no change", p.Changes)
	}

	// The tag moves: the plan shows it, the apply rolls to it.
	second := images.Move(digestImage, "v2")
	p := h.plan("default/shop", digestYAML(""), secrets)
	if c := changeOf(p, "egg/web"); c.Action != "~" || !slices.Equal(c.Changed, []string{"digest"}) {
		t.Fatalf("egg/web in the plan after the tag moved: %+v, want an update of its digest", c)
	}
	want := "web: image " + digestImage + " moved " + first[:19] + "… → " + second[:19] + "…"
	if !slices.Contains(p.Notes, want) {
		t.Fatalf("plan notes %q, want %q", p.Notes, want)
	}
	wantSucceeded(t, lastStep(h.follow(h.apply("default/shop", p.ID).Events)))
	if img, _ := h.webImage(); img != pinned(t, second) {
		t.Fatalf("after the moved tag's apply web runs %s, want %s", img, pinned(t, second))
	}

	// A rollback to the first apply: its digest, though the tag is at v2.
	asked := len(images.Calls())
	rb := h.rollback("default/shop", `{"to": 1}`)
	if c := changeOf(rb, "egg/web"); c.Action != "~" || !slices.Equal(c.Changed, []string{"digest"}) {
		t.Fatalf("egg/web in the rollback plan: %+v, want its digest changed back", c)
	}
	wantSucceeded(t, lastStep(h.follow(h.apply("default/shop", rb.ID).Events)))
	if img, _ := h.webImage(); img != pinned(t, first) {
		t.Fatalf("after the rollback web runs %s, want the first digest %s", img, pinned(t, first))
	}
	if n := len(images.Calls()); n != asked {
		t.Fatalf("the rollback asked the registry %d times, want never", n-asked)
	}
}

// A registry the control plane cannot reach fails the plan, naming the
// egg, the image and the registry, and plans nothing; with pull: missing
// the registry is not asked and the hosts get the tag; with pull: always
// too, and the agent is told to pull it for every new container.
func TestAnUnreachableRegistryFailsThePlanUnlessTheEggPullsWhatIsMissing(t *testing.T) {
	images := imagereftest.New()
	h := newApplyHarness(t, applyOptions{images: images})
	h.report("h1")
	secrets := map[string]string{"reg_pass": "pw-1"}
	images.Unreachable("registry.example:5000", true)

	e := decode[api.Error](t, h.do("POST", "/api/v1/projects/default/shop/plan", strings.NewReader(string(planBody(t, digestYAML(""), secrets)))),
		http.StatusUnprocessableEntity)
	for _, part := range []string{"egg web", "image " + digestImage, "registry registry.example:5000", imagereftest.ErrUnreachable.Error(), "pull: missing"} {
		if e.Code != api.CodeImageUnresolved || !strings.Contains(e.Message, part) {
			t.Errorf("plan with the registry unreachable: %+v, want %s saying %q", e, api.CodeImageUnresolved, part)
		}
	}
	if strings.Contains(e.Message, "pw-1") {
		t.Error("the refusal shows the registry password")
	}

	asked := len(images.Calls())
	for _, pull := range []contract.PullPolicy{contract.PullMissing, contract.PullAlways} {
		wantSucceeded(t, h.applyAndWait("default/shop", digestYAML(string(pull)), secrets))
		if img, got := h.webImage(); img != digestImage || got != pull {
			t.Fatalf("with pull: %s web runs %s (pull %q), want the tag %s", pull, img, got, digestImage)
		}
	}
	if n := len(images.Calls()); n != asked {
		t.Fatalf("pull: missing and always asked the registry %d times, want never", n-asked)
	}
}

// A project without a login of its own for the image's registry is
// resolved with the cluster's (hatch registry login), as its hosts pull;
// two eggs of one image ask the registry once.
func TestThePlanAsksTheRegistryWithTheClustersLogin(t *testing.T) {
	images := imagereftest.New()
	h := newApplyHarness(t, applyOptions{images: images})
	h.report("h1")
	if _, err := h.providers.LoginRegistry(t.Context(), "registry.example:5000", "cluster-ci", []byte("cluster-pw")); err != nil {
		t.Fatal(err)
	}
	p := h.plan("default/shop", "project: shop\neggs:\n  web:\n    image: "+digestImage+"\n  worker:\n    image: "+digestImage+"\n", nil)
	for _, key := range []string{"egg/web", "egg/worker"} {
		if d := changeOf(p, key).Inputs["digest"]; d != imagereftest.DigestOf(digestImage) {
			t.Errorf("%s planned with digest %v, want the tag's", key, d)
		}
	}
	calls := images.Calls()
	if len(calls) != 1 || calls[0].Login == nil || *calls[0].Login != (imageref.Login{Username: "cluster-ci", Password: "cluster-pw"}) {
		t.Fatalf("the registry was asked %+v, want with the cluster's login", calls)
	}
}
