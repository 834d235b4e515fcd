package dockertest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/docker/docker/client"
)

// Eventually calls check every interval until it returns nil, and fails the
// test with check's last error if that has not happened within timeout.
// Real containers take real time to start, turn healthy or stop: tests poll
// for the state they expect instead of sleeping a guessed duration.
func Eventually(t testing.TB, timeout, interval time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %v", timeout, err)
		}
		time.Sleep(interval)
	}
}

// ContainerIP returns the container's address on network (or on its only
// network when network is empty).
func ContainerIP(ctx context.Context, cli client.APIClient, id, network string) (string, error) {
	c, err := cli.ContainerInspect(ctx, id)
	if err != nil {
		return "", err
	}
	if c.NetworkSettings == nil {
		return "", fmt.Errorf("container %s has no network settings", id)
	}
	for name, ep := range c.NetworkSettings.Networks {
		if (network == "" || name == network) && ep.IPAddress != "" {
			return ep.IPAddress, nil
		}
	}
	return "", fmt.Errorf("container %s has no address on network %q", id, network)
}

// Get asks url with a short timeout and returns the status and body.
func Get(ctx context.Context, url string) (int, string, error) {
	return Do(ctx, http.MethodGet, url, nil)
}

// Do sends one request with a short timeout and returns the status and body.
func Do(ctx context.Context, method, url string, body io.Reader) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
