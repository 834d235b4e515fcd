package serverd

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"slices"
	"testing"
)

func TestCertNamesCoverTheListenAddressAndTheExtraNames(t *testing.T) {
	names := certNames("10.1.2.3:7700", []string{"cp.example.com", "192.0.2.9", "localhost"})
	for _, want := range []string{"localhost", "127.0.0.1", "::1", "10.1.2.3", "cp.example.com", "192.0.2.9"} {
		if !slices.Contains(names, want) {
			t.Errorf("certNames = %v, missing %s", names, want)
		}
	}
	if n := len(names); n != len(slices.Compact(slices.Clone(names))) {
		t.Errorf("certNames has duplicates: %v", names)
	}
	for _, name := range certNames(":7700", nil) {
		if name == "" || name == "::" || name == "0.0.0.0" {
			t.Errorf("certNames of an unspecified listen address holds %q", name)
		}
	}
}

// tlsConfigStub marks a serving as TLS in tests of localURL.
var tlsConfigStub tls.Config

func TestLocalURLPicksAnAddressTheCertificateCovers(t *testing.T) {
	leaf := &x509.Certificate{DNSNames: []string{"cp.example.com"}}
	loopback := &x509.Certificate{IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	tcp := func(s string) net.Addr { a, _ := net.ResolveTCPAddr("tcp", s); return a }
	tlsOn := serving{tls: &tlsConfigStub, leaf: loopback}
	for _, tc := range []struct {
		addr net.Addr
		srv  serving
		want string
	}{
		{tcp("[::]:7700"), tlsOn, "https://127.0.0.1:7700"},
		{tcp("127.0.0.1:7700"), tlsOn, "https://127.0.0.1:7700"},
		{tcp("10.0.0.5:7700"), serving{tls: &tlsConfigStub}, "https://10.0.0.5:7700"},
		{tcp("0.0.0.0:7700"), serving{tls: &tlsConfigStub, leaf: leaf}, "https://cp.example.com:7700"},
		{tcp("127.0.0.1:7700"), serving{}, "http://127.0.0.1:7700"},
	} {
		if got := localURL(tc.addr, tc.srv); got != tc.want {
			t.Errorf("localURL(%s) = %s, want %s", tc.addr, got, tc.want)
		}
	}
}

func TestInsecureHTTPIsAllowedOnEveryLoopbackAddress(t *testing.T) {
	for _, listen := range []string{"127.0.0.1:7700", "127.0.0.2:0", "[::1]:0", "localhost:0"} {
		if err := checkPlainHTTP(t.Context(), TLS{InsecureHTTP: true}, listen); err != nil {
			t.Errorf("--insecure-http --listen %s: %v", listen, err)
		}
	}
	if err := checkPlainHTTP(t.Context(), TLS{}, ":7700"); err != nil {
		t.Errorf("HTTPS on every interface: %v", err)
	}
}
