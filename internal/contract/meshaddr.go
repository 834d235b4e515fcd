package contract

import (
	"errors"
	"fmt"
	"net/netip"
)

// MaxMeshAddresses is how many mesh addresses a status report may carry:
// every peer tries them in order, so a long list is a list of dials.
const MaxMeshAddresses = 16

// ErrMeshAddress is the error CheckMeshAddresses wraps.
var ErrMeshAddress = errors.New("not a mesh address")

// CheckMeshAddresses checks the mesh addresses a host advertises
// (StatusReport.MeshAddresses), which the control plane hands to every
// other host to dial: at most MaxMeshAddresses, each "ip:port" with a
// literal IP (no name: a name resolves differently on each peer) and a
// port, none twice, and none a peer must never dial: link-local (a cloud's
// metadata service is 169.254.169.254), unspecified, multicast or
// broadcast, and loopback unless allowLoopback (the control plane allows
// it only when it listens on loopback itself: agents on the same machine,
// as in `hatch up` and tests). An IPv4-mapped IPv6 address is judged as
// the IPv4 address it maps. The error names the address, its index and
// the rule.
func CheckMeshAddresses(addrs []string, allowLoopback bool) error {
	if len(addrs) > MaxMeshAddresses {
		return fmt.Errorf("%d mesh addresses: at most %d: %w", len(addrs), MaxMeshAddresses, ErrMeshAddress)
	}
	seen := make(map[netip.AddrPort]bool, len(addrs))
	for i, a := range addrs {
		ap, err := checkMeshAddress(a, allowLoopback)
		if err != nil {
			return fmt.Errorf("mesh address [%d] %q: %w", i, a, err)
		}
		if seen[ap] {
			return fmt.Errorf("mesh address [%d] %q: listed twice: %w", i, a, ErrMeshAddress)
		}
		seen[ap] = true
	}
	return nil
}

func checkMeshAddress(a string, allowLoopback bool) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(a)
	if err != nil {
		return ap, fmt.Errorf("want ip:port with a literal IP (for example 10.0.0.5:7702 or [fd00::5]:7702): %w", ErrMeshAddress)
	}
	ip := ap.Addr().Unmap()
	var why string
	switch {
	case ap.Port() == 0:
		why = "port 0"
	case ip.Zone() != "":
		why = "an IPv6 zone (a link-local address)"
	case ip.IsUnspecified():
		why = "an unspecified address"
	case ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast():
		why = "a link-local address"
	case ip.IsMulticast() || ip.IsInterfaceLocalMulticast():
		why = "a multicast address"
	case ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		why = "the broadcast address"
	case ip.IsLoopback() && !allowLoopback:
		why = "a loopback address, while the control plane does not listen on loopback"
	}
	if why != "" {
		return ap, fmt.Errorf("%s: %w", why, ErrMeshAddress)
	}
	return ap, nil
}
