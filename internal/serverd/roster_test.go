package serverd

import (
	"strings"
	"testing"
)

func TestAdvertiseURL(t *testing.T) {
	const local = "https://10.0.0.5:7700"
	for _, c := range []struct {
		flag, listen, want, err string
	}{
		{listen: "10.0.0.5:7700", want: local}, // a specific address: this machine's URL
		{listen: ":7700", want: ""},            // every interface: not registered
		{listen: "0.0.0.0:7700", want: ""},     // the same
		{flag: "https://a.example:7700/", listen: ":7700", want: "https://a.example:7700"},
		{flag: "a.example:7700", listen: ":7700", err: "want https://host:port"},
		{flag: "https://a.example:7700/api", listen: ":7700", err: "want https://host:port"},
		{flag: "https://user@a.example:7700", listen: ":7700", err: "want https://host:port"},
	} {
		got, err := advertiseURL(c.flag, c.listen, local)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "--advertise-url") {
				t.Errorf("advertiseURL(%q, %q) = %q, %v; want an error naming --advertise-url", c.flag, c.listen, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("advertiseURL(%q, %q) = %q, %v; want %q", c.flag, c.listen, got, err, c.want)
		}
	}
}
