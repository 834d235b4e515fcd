package contract

import (
	"regexp"
	"testing"
)

var dockerName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)

func TestNamesAreReadableAndNeverCollide(t *testing.T) {
	a := ContainerName("default", "a-b", "c", 0, "h1", "x")
	b := ContainerName("default", "a", "b-c", 0, "h1", "x")
	if a == b {
		t.Errorf("a-b/c and a/b-c collide: %s", a)
	}
	if ContainerName("staging", "shop", "web", 0, "h1", "x") == ContainerName("production", "shop", "web", 0, "h1", "x") {
		t.Error("two namespaces collide")
	}
	if ContainerName("default", "shop", "web", 0, "h1", "x") == ContainerName("default", "shop", "web", 0, "h2", "x") {
		t.Error("two hosts sharing one engine collide")
	}
	if NetworkName("h1", "default", "a-b", "c") == NetworkName("h1", "default", "a", "b-c") {
		t.Error("network names collide")
	}
	if VolumeName("h1", "default", "shop", "data") == VolumeName("h2", "default", "shop", "data") {
		t.Error("volume names of two hosts collide")
	}
	n := ContainerName("default", "shop", "web", 7, "h1", RandomSuffix())
	if !regexp.MustCompile(`^hatch-shop-web-7-[0-9a-f]{8}-[0-9a-f]{6}$`).MatchString(n) || !dockerName.MatchString(n) {
		t.Errorf("container name %q is not readable or not valid for Docker", n)
	}
	if s1, s2 := RandomSuffix(), RandomSuffix(); s1 == s2 {
		t.Error("two random suffixes are equal")
	}
}
