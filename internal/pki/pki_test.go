package pki

import (
	"strings"
	"testing"
)

func TestClientConfigRefusesBadFingerprints(t *testing.T) {
	for _, fp := range []string{"", "abc", strings.Repeat("zz", 32)} {
		if _, err := ClientConfig(fp, "localhost"); err == nil {
			t.Errorf("ClientConfig(%q) succeeded", fp)
		}
	}
}

func TestTokenRoundTrip(t *testing.T) {
	fp := strings.Repeat("ab", 32)
	tok := NewToken(KindJoin, fp)
	parsed, err := ParseToken(tok.String())
	if err != nil {
		t.Fatal(err)
	}
	if parsed != tok {
		t.Fatalf("parsed %+v, want %+v", parsed, tok)
	}
	if !EqualHash(parsed.Hash(), tok.Hash()) || EqualHash(parsed.Hash(), NewToken(KindJoin, fp).Hash()) {
		t.Fatal("hash comparison is wrong")
	}
	for _, bad := range []string{"", "hatch-join", "hatch-root.x." + fp, "hatch-join..", "hatch-join.s.nothex", "join.s." + fp} {
		_, err := ParseToken(bad)
		if err == nil {
			t.Errorf("ParseToken(%q) succeeded", bad)
			continue
		}
		if len(bad) > 12 && strings.Contains(err.Error(), bad) {
			t.Errorf("the error repeats the token: %v", err)
		}
	}
}
