package client

import (
	"context"
	"fmt"
	"net/http"
	"os"

	"github.com/hatchery/hatchery/internal/apiclient"
)

// Blobs makes the calls at /api/v1/blobs/{digest} (docs/API.md, "Blobs").
// Get one with Client.Blobs.
type Blobs struct{ c *Client }

// Has reports whether the server has a blob; asking also keeps it from
// being collected for a while, so the plan that follows can name it.
func (b *Blobs) Has(ctx context.Context, digest string) (bool, error) {
	resp, err := b.c.Send(ctx, http.MethodHead, "/api/v1/blobs/"+digest, nil, "")
	if err != nil {
		return false, err
	}
	defer apiclient.DrainClose(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusNotFound:
		return false, nil
	}
	return false, fmt.Errorf("checking for a build context: %w", apiclient.ReadError(resp))
}

// Put uploads a file as the blob with the digest.
func (b *Blobs) Put(ctx context.Context, digest, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	resp, err := b.c.Send(ctx, http.MethodPut, "/api/v1/blobs/"+digest, f, "application/octet-stream")
	if err != nil {
		return err
	}
	defer apiclient.DrainClose(resp.Body)
	if resp.StatusCode/100 != 2 {
		return apiclient.ReadError(resp)
	}
	return nil
}
