package store

import "context"

// actorKey is the context key of the actor; unexported so that only
// WithActor sets it.
type actorKey struct{}

// WithActor returns a context that says the work done with it was asked for
// by actor, the name of an admin token. The server sets it on every admin
// request; work that outlives the request (an apply) carries it on.
//
// Every store records it: an event written with such a context whose Actor
// is empty gets this actor, whichever method writes it, so that "who ran
// what" needs no parameter threaded through every layer between the request
// and the write.
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// ActorOf returns the actor WithActor put in ctx, or "" if none (the control
// plane's own work, or a host's).
func ActorOf(ctx context.Context) string {
	a, _ := ctx.Value(actorKey{}).(string)
	return a
}
