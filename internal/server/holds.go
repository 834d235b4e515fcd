package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/holds"
)

// What the server holds open, each registered under its principal in one
// registry (package holds): bounded per principal where a host could
// otherwise hold thousands, and ended when the principal's right ends.
const (
	// endpointDesiredState is the agents' desired-state long-poll.
	endpointDesiredState holds.Endpoint = "desired-state"
	// endpointSessionOffers is the agents' long-poll of session offers.
	endpointSessionOffers holds.Endpoint = "session-offers"
	// endpointSessionStream is an agent's WebSocket for a session (bounded
	// by the sessions broker's per-host limit).
	endpointSessionStream holds.Endpoint = "session-stream"
	// endpointSession is an operator's logs or exec WebSocket (bounded by
	// the broker's per-admin limit).
	endpointSession holds.Endpoint = "session"
	// endpointEvents is the event log's stream (events?follow=1).
	endpointEvents holds.Endpoint = "events"
	// endpointApplyProgress is an apply's progress stream.
	endpointApplyProgress holds.Endpoint = "apply-progress"
	// endpointRunWait is the long-poll of a run's state (hatch run waits
	// on it for the run's end).
	endpointRunWait holds.Endpoint = "run-wait"
)

const (
	// pollsPerHost is how many long-polls of each kind one host may hold on
	// one server. An agent holds one; the second lets a restarted agent's
	// new poll in beside its old one whose connection is not yet seen dead
	// (it would replace it anyway). Beyond it the oldest is answered at once.
	pollsPerHost = 2
	// eventStreamsPerToken is how many event streams one admin token may
	// follow at once on one server; beyond it the oldest ends.
	eventStreamsPerToken = 32
	// runWaitsPerToken is how many runs' long-polls one admin token may
	// hold at once on one server (a `hatch run` holds one); beyond it the
	// oldest is answered at once.
	runWaitsPerToken = 32
	// rightsRecheck is how often the principals holding something are
	// checked against the store even when no event woke the check: the
	// bound on ending what a revoked principal holds should a wake-up be
	// missed. An event (a revocation or removal records one, on every
	// server's wake-up through the store) wakes the check at once.
	rightsRecheck = 10 * time.Second
	// rightsRecheckGap is the least time between two checks: a burst of
	// events makes one check a second, not one each.
	rightsRecheckGap = time.Second
)

// holdLimits are the bounds per principal per endpoint (docs/API.md).
func holdLimits() holds.Limits {
	return holds.Limits{
		{Kind: holds.Host, Endpoint: endpointDesiredState}:   pollsPerHost,
		{Kind: holds.Host, Endpoint: endpointSessionOffers}:  pollsPerHost,
		{Kind: holds.AdminToken, Endpoint: endpointEvents}:   eventStreamsPerToken,
		{Kind: holds.AdminToken, Endpoint: endpointRunWait}:  runWaitsPerToken,
		{Kind: holds.DeployToken, Endpoint: endpointEvents}:  eventStreamsPerToken,
		{Kind: holds.DeployToken, Endpoint: endpointRunWait}: runWaitsPerToken,
	}
}

type principalKey struct{}

// withPrincipal puts the request's principal on its context, for what it
// holds open to be registered under it.
func withPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// principalOf is the request's principal, as wrap put it on its context.
func principalOf(ctx context.Context) Principal {
	p, _ := ctx.Value(principalKey{}).(Principal)
	return p
}

// holder is the principal a request holds things under: its admin or
// deploy token's name, or its host; a join token holds nothing open.
func holder(ctx context.Context) (holds.Principal, bool) {
	p := principalOf(ctx)
	switch {
	case p.Admin:
		return holds.AdminTokenNamed(p.Name), true
	case p.Deploy():
		return holds.DeployTokenNamed(p.Name), true
	case p.HostID != "":
		return holds.HostID(p.HostID), true
	}
	return holds.Principal{}, false
}

// hold registers what the request holds open (a stream or a long-poll on
// e) under its principal. The caller selects on the hold's Done, and
// releases it. A long-poll checks its token again before it answers after a
// wait (recheck); a stream takes its hold with holdChecked.
func (s *Server) hold(r *http.Request, e holds.Endpoint) (*holds.Hold, error) {
	p, ok := holder(r.Context())
	if !ok {
		return nil, api.Errorf(api.CodeForbidden, "this token may not hold %s open", e)
	}
	return s.holds.Hold(p, e), nil
}

// holdChecked is hold, then a check of the principal: a right that ended
// between the request's authentication and the registration is seen here,
// one that ends later by the rights check (watchRights), which finds the
// hold registered.
func (s *Server) holdChecked(r *http.Request, e holds.Endpoint) (*holds.Hold, error) {
	h, err := s.hold(r, e)
	if err != nil {
		return nil, err
	}
	if err := s.recheck(r); err != nil {
		h.Release()
		return nil, err
	}
	return h, nil
}

// recheck authenticates the request's token again: a long-poll does before
// it answers with something new, so that a host removed (or a token
// revoked) while its request waited is told so (401) rather than answered.
func (s *Server) recheck(r *http.Request) error {
	_, err := s.deps.Auth.Authenticate(r.Context(), bearer(r.Header.Get("Authorization")))
	if ref := (*refusal)(nil); errors.As(err, &ref) {
		return api.Errorf(api.CodeUnauthorized, "%s", ref.reason)
	}
	if errors.Is(err, ErrUnauthenticated) {
		return api.Errorf(api.CodeUnauthorized, "this token is no longer accepted")
	}
	if err != nil {
		return fmt.Errorf("check the token again: %w", err)
	}
	return nil
}

// ended is what a holder answers once its hold was ended by its
// principal's right ending: 401 with the reason. A hold replaced by a newer
// one is not an error: its holder answers as if its wait had passed.
func ended(h *holds.Hold) error {
	cause := h.Cause()
	var apiErr *api.Error
	if errors.As(cause, &apiErr) {
		return apiErr
	}
	return api.Errorf(api.CodeUnauthorized, "%v", cause)
}

// heldOpenGauge is hatch_held_open: what the registry holds now.
func heldOpenGauge(r *holds.Registry) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hatch_held_open",
		Help: "Long-polls and streams held open now, over every principal and endpoint.",
	}, func() float64 { return float64(r.Len()) })
}

// pollingHosts is how many distinct hosts (and admin tokens) hold a
// desired-state poll on this server: what the peer-answer spread counts.
func (s *Server) pollingHosts() int { return s.holds.Holders(endpointDesiredState) }

// replaced reports whether a hold was ended by a newer one of its principal.
func replaced(h *holds.Hold) bool { return errors.Is(h.Cause(), holds.ErrReplaced) }

// watchRights ends what principals whose right ended hold open, until ctx
// ends. It checks the principals holding anything against the store when
// an event is recorded (by any server: a revocation and a removal each
// record one, and every server's store wakes its waiters at another's
// commit), at most once per rightsRecheckGap, and every rightsRecheck in
// any case. A revocation on any server so ends the streams on every server
// within about rightsRecheckGap, at worst rightsRecheck.
func (s *Server) watchRights(ctx context.Context) {
	log := s.log.With(zap.String("component", "rights"))
	tick := time.NewTicker(rightsRecheck)
	defer tick.Stop()
	failing := false
	for {
		changed := s.deps.Fleet.WatchEvents() // before the check: no event slips between
		checked := time.Now()
		if err := s.endEndedRights(ctx, log); err != nil && ctx.Err() == nil {
			if !failing {
				log.Warn("cannot check the rights of what is held open; checking again", zap.Error(err))
			}
			failing = true
		} else {
			failing = false
		}
		select {
		case <-changed:
		case <-tick.C:
		case <-ctx.Done():
			return
		}
		select {
		case <-time.After(time.Until(checked.Add(rightsRecheckGap))):
		case <-ctx.Done():
			return
		}
	}
}

// endEndedRights ends everything held by the principals whose right ended.
func (s *Server) endEndedRights(ctx context.Context, log *zap.Logger) error {
	var tokens, hosts []string
	for _, p := range slices.Concat(s.holds.Principals(holds.AdminToken), s.holds.Principals(holds.DeployToken)) {
		tokens = append(tokens, p.ID)
	}
	for _, p := range s.holds.Principals(holds.Host) {
		hosts = append(hosts, p.ID)
	}
	if len(tokens) == 0 && len(hosts) == 0 {
		return nil
	}
	gone, err := s.deps.Fleet.EndedRights(ctx, tokens, hosts)
	if err != nil {
		return err
	}
	for _, g := range gone {
		ps := []holds.Principal{holds.HostID(g.Host)}
		if g.AdminToken != "" {
			// One name space for both kinds: the name is one token's.
			ps = []holds.Principal{holds.AdminTokenNamed(g.AdminToken), holds.DeployTokenNamed(g.AdminToken)}
		}
		for _, p := range ps {
			if n := s.holds.End(p, api.Errorf(api.CodeUnauthorized, "%s", g.Reason)); n > 0 {
				log.Info("ended what a principal held open: its right ended",
					zap.String("kind", string(p.Kind)), zap.String("id", p.ID), zap.Int("ended", n))
			}
		}
	}
	return nil
}
