package storetest

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// RunRegistryLogins checks store.RegistryLogins.
func RunRegistryLogins(t *testing.T, open Open) {
	s := open(t)
	ghcr := store.RegistryLogin{Host: "ghcr.io", Username: "ci", Sealed: "sealed-1", Fingerprint: "fp1", UpdatedAt: t0}
	local := store.RegistryLogin{Host: "127.0.0.1:5000", Username: "me", Sealed: "sealed-2", Fingerprint: "fp2", UpdatedAt: t0}
	for _, l := range []store.RegistryLogin{ghcr, local} {
		if err := s.PutRegistryLogin(ctx(t), l); err != nil {
			t.Fatal(err)
		}
	}
	ghcr.Username, ghcr.Sealed, ghcr.Fingerprint, ghcr.UpdatedAt = "ci2", "sealed-3", "fp3", t0.Add(time.Minute)
	if err := s.PutRegistryLogin(ctx(t), ghcr); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListRegistryLogins(ctx(t))
	if want := []store.RegistryLogin{local, ghcr}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ListRegistryLogins = %+v, %v; want %+v (a second login replaces the host's)", got, err, want)
	}
	if err := s.DeleteRegistryLogin(ctx(t), "ghcr.io"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRegistryLogin(ctx(t), "ghcr.io"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleting a login twice: %v, want ErrNotFound", err)
	}
	if got, err := s.ListRegistryLogins(ctx(t)); err != nil || !reflect.DeepEqual(got, []store.RegistryLogin{local}) {
		t.Fatalf("after the logout ListRegistryLogins = %+v, %v", got, err)
	}
}
