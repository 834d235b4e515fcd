package store

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/seal"
)

func TestDesiredStateIsStoredWithSecretsSealed(t *testing.T) {
	box, err := seal.New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	d := contract.DesiredState{HostID: "h1", Workloads: []contract.WorkloadSpec{{
		Namespace: "default", Project: "shop", Egg: "web", Replicas: 2,
		Secrets:  []contract.SecretFile{{Name: "api_key", Handle: "s1:hmac", Value: "hunter2-plaintext"}, {Name: "empty", Handle: "s2"}},
		PullAuth: &contract.RegistryAuth{Registry: "ghcr.io", Username: "ci", Handle: "s4:hmac", Password: "registry-pass-plaintext"},
	}}, Certificates: []contract.Certificate{{Host: "shop.example.com", Chain: "CHAIN", Key: "private-key-plaintext", Source: "acme"}},
		Runs: []contract.Run{{ID: "r1", Workload: contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: "migrate", Replicas: 1,
			Secrets: []contract.SecretFile{{Name: "db_password", Handle: "s3:hmac", Value: "run-secret-plaintext"}}}}}}
	d.Seal()
	stored, err := EncodeDesiredState(box, d)
	if err != nil {
		t.Fatal(err)
	}
	if stored.HostID != "h1" || stored.Version != d.Version || stored.Version == "" {
		t.Fatalf("stored %+v, want host h1 at version %s", stored, d.Version)
	}
	if bytes.Contains(stored.Doc, []byte("hunter2")) || bytes.Contains(stored.Doc, []byte("private-key")) ||
		bytes.Contains(stored.Doc, []byte("run-secret")) || bytes.Contains(stored.Doc, []byte("registry-pass")) {
		t.Fatalf("the stored document holds the secret in clear: %s", stored.Doc)
	}
	if d.Workloads[0].Secrets[0].Value != "hunter2-plaintext" || d.Certificates[0].Key != "private-key-plaintext" ||
		d.Runs[0].Workload.Secrets[0].Value != "run-secret-plaintext" || d.Workloads[0].PullAuth.Password != "registry-pass-plaintext" {
		t.Fatal("encoding changed the caller's state")
	}
	back, err := DecodeDesiredState(box, stored)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, d) {
		t.Fatalf("round trip = %+v\nwant %+v", back, d)
	}

	other, _ := seal.New(bytes.Repeat([]byte{8}, 32))
	if _, err := DecodeDesiredState(other, stored); err == nil {
		t.Fatal("a state sealed with another key opened")
	}
}

func TestNoStoredStateDecodesEmpty(t *testing.T) {
	d, err := DecodeDesiredState(nil, DesiredState{HostID: "h1"})
	if err != nil || !reflect.DeepEqual(d, contract.DesiredState{HostID: "h1"}) {
		t.Fatalf("DecodeDesiredState of nothing = %+v, %v", d, err)
	}
}

func TestNotifierWakesEveryWaiterOfItsKeyOnce(t *testing.T) {
	var n Notifier
	a1, a2, b := n.Wait("a"), n.Wait("a"), n.Wait("b")
	n.Notify("a")
	for i, ch := range []<-chan struct{}{a1, a2} {
		select {
		case <-ch:
		default:
			t.Fatalf("waiter %d of a not woken", i)
		}
	}
	select {
	case <-b:
		t.Fatal("waiter of b woken by a")
	default:
	}
	next := n.Wait("a")
	select {
	case <-next:
		t.Fatal("a wait after the Notify is already woken")
	default:
	}
	n.Notify("nobody-waits") // no panic, nothing to do
}

func TestNotifyAllWakesEveryKeyAndLaterWaitsWaitAgain(t *testing.T) {
	var n Notifier
	n.NotifyAll() // nobody waits: nothing to do
	a, b := n.Wait("a"), n.Wait("b")
	n.NotifyAll()
	for key, ch := range map[string]<-chan struct{}{"a": a, "b": b} {
		select {
		case <-ch:
		default:
			t.Fatalf("waiter of %s not woken", key)
		}
	}
	next := n.Wait("a")
	select {
	case <-next:
		t.Fatal("a wait after NotifyAll is already woken")
	default:
	}
	n.Notify("a")
	select {
	case <-next:
	default:
		t.Fatal("a wait after NotifyAll is not woken by the next Notify")
	}
}
