package main

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// check asks url once and succeeds on a 2xx or 3xx answer, the same rule as
// Hatchery's HTTP probe. It is what `app -check` runs as a Docker HEALTHCHECK:
// a FROM scratch image has no shell or curl to do it.
func check(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	client := &http.Client{
		// A redirect is an answer in itself: following it would probe another URL.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return nil
}
