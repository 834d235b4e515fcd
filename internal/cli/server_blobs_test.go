package cli

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/blob/blobtest"
	"github.com/hatchery/hatchery/internal/client"
)

// fetchBlob GETs a blob through c and returns its status and bytes.
func fetchBlob(t *testing.T, c *client.Client, digest string) (int, []byte) {
	t.Helper()
	resp, err := c.Send(t.Context(), http.MethodGet, "/api/v1/blobs/"+digest, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// Two servers on one PostgreSQL database: a blob of several chunks uploaded
// through A is served by B byte for byte, and neither keeps it on its disk.
func TestABlobUploadedToOneServerIsServedByAnother(t *testing.T) {
	servers := startTwoServers(t)
	cfg, dir := servers.cfg, servers.dir
	a, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	cfgB := cfg
	cfgB.Server = "https://" + servers.addrB
	b, err := client.New(cfgB)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	eventually(t, 30*time.Second, "server B answers", func() bool {
		_, err := b.Blobs().Has(t.Context(), blobtest.Digest(nil))
		return err == nil
	})

	content := blobtest.Random(3<<20+4321, 17) // four chunks, the last one short
	digest := blobtest.Digest(content)
	file := filepath.Join(dir, "context.tar")
	if err := os.WriteFile(file, content, 0o600); err != nil {
		t.Fatal(err)
	}
	if has, err := b.Blobs().Has(t.Context(), digest); has || err != nil {
		t.Fatalf("B has the blob before its upload: %v, %v", has, err)
	}
	if err := a.Blobs().Put(t.Context(), digest, file); err != nil {
		t.Fatalf("upload through A: %v", err)
	}
	if has, err := b.Blobs().Has(t.Context(), digest); !has || err != nil {
		t.Fatalf("B does not have the blob uploaded through A: %v, %v", has, err)
	}
	code, got := fetchBlob(t, b, digest)
	if code != http.StatusOK || !bytes.Equal(got, content) {
		t.Fatalf("GET through B = %d with %d bytes, want 200 with the %d uploaded", code, len(got), len(content))
	}
	for _, d := range []string{servers.dataA, servers.dataB} {
		if entries, _ := os.ReadDir(filepath.Join(d, "blobs", "sha256")); len(entries) != 0 {
			t.Fatalf("%s keeps blob files: the blob should be in the database only", d)
		}
	}
}
