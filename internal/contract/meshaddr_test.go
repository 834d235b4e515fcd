package contract

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestCheckMeshAddressesRefusesWhatNoPeerShouldDial(t *testing.T) {
	for _, tc := range []struct {
		addr     string
		loopback bool   // the control plane listens on loopback
		want     string // "" accepted, else a part of the error
	}{
		{"10.0.0.5:7702", false, ""},
		{"[fd00::5]:7702", false, ""},
		{"203.0.113.7:7702", false, ""},
		{"127.0.0.1:7702", true, ""},
		{"[::1]:7702", true, ""},
		{"127.0.0.1:2375", false, "loopback"},
		{"[::1]:7702", false, "loopback"},
		{"[::ffff:127.0.0.1]:2375", false, "loopback"},
		{"169.254.169.254:80", true, "link-local"},
		{"[::ffff:169.254.169.254]:80", true, "link-local"},
		{"[fe80::1]:7702", true, "link-local"},
		{"[fe80::1%eth0]:7702", true, "zone"},
		{"0.0.0.0:7702", true, "unspecified"},
		{"[::]:7702", true, "unspecified"},
		{"224.0.0.1:7702", true, "link-local"},
		{"239.1.2.3:7702", true, "multicast"},
		{"[ff02::1]:7702", true, "link-local"},
		{"[ff05::1]:7702", true, "multicast"},
		{"255.255.255.255:7702", true, "broadcast"},
		{"10.0.0.5:0", true, "port 0"},
		{"not an address", true, "ip:port"},
		{"node1.example:7702", true, "ip:port"},
		{"10.0.0.5", true, "ip:port"},
	} {
		err := CheckMeshAddresses([]string{tc.addr}, tc.loopback)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s (loopback %v): %v, want accepted", tc.addr, tc.loopback, err)
		case tc.want != "" && (err == nil || !errors.Is(err, ErrMeshAddress) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s (loopback %v): %v, want refused for %q", tc.addr, tc.loopback, err, tc.want)
		}
	}
	many := make([]string, MaxMeshAddresses+1)
	for i := range many {
		many[i] = fmt.Sprintf("10.0.0.%d:7702", i+1)
	}
	if err := CheckMeshAddresses(many[:MaxMeshAddresses], false); err != nil {
		t.Errorf("%d addresses: %v", MaxMeshAddresses, err)
	}
	if err := CheckMeshAddresses(many, false); !errors.Is(err, ErrMeshAddress) {
		t.Errorf("%d addresses: %v, want refused", len(many), err)
	}
	if err := CheckMeshAddresses([]string{"10.0.0.1:7702", "10.0.0.1:7702"}, false); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("an address listed twice: %v", err)
	}
}
