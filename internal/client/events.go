package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/hatchery/hatchery/internal/api"
)

// Events reads the event log at /api/v1/events (docs/API.md, "Events"). Get
// one with Client.Events.
type Events struct{ c *Client }

// List returns the events after seq, oldest first (at most a page).
func (e *Events) List(ctx context.Context, since int64) ([]api.Event, error) {
	var out api.EventList
	err := e.c.Do(ctx, http.MethodGet, "/api/v1/events?limit=1000&since="+strconv.FormatInt(since, 10), nil, &out)
	return out.Events, err
}

// LastSeq is the sequence number of the newest event, so that a
// follower starts after what happened before.
func (e *Events) LastSeq(ctx context.Context) (int64, error) {
	var last int64
	for {
		page, err := e.List(ctx, last)
		if err != nil || len(page) == 0 {
			return last, err
		}
		last = page[len(page)-1].Seq
	}
}

// Follow streams the events after since to fn until ctx ends or fn
// fails.
func (e *Events) Follow(ctx context.Context, since int64, fn func(api.Event) error) error {
	return e.c.stream(ctx, "/api/v1/events?follow=1&since="+strconv.FormatInt(since, 10), func(ev sseEvent) error {
		var e api.Event
		if err := json.Unmarshal([]byte(ev.Data), &e); err != nil {
			return fmt.Errorf("event: %w", err)
		}
		return fn(e)
	})
}
