package backup

import (
	"context"

	"golang.org/x/sync/errgroup"
)

// ordered runs work on each item next produces, at most depth at a time, and
// hands the results to sink one at a time in the items' order. next returns
// ok false at the end. The first error of any of them stops the rest and is
// returned. At most depth+2 items exist at once (one being produced, depth
// queued or worked on, one being sunk): what bounds a backup's memory.
func ordered[T, R any](ctx context.Context, depth int, next func() (T, bool, error), work func(context.Context, T) (R, error), sink func(R) error) error {
	g, ctx := errgroup.WithContext(ctx)
	type future = chan R
	queue := make(chan future, depth)
	g.Go(func() error {
		defer close(queue)
		for {
			item, ok, err := next()
			if err != nil || !ok {
				return err
			}
			f := make(future, 1)
			select {
			case queue <- f:
			case <-ctx.Done():
				return ctx.Err()
			}
			g.Go(func() error {
				r, err := work(ctx, item)
				if err != nil {
					return err
				}
				f <- r
				return nil
			})
		}
	})
	g.Go(func() error {
		for f := range queue {
			select {
			case r := <-f:
				if err := sink(r); err != nil {
					return err
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	return g.Wait()
}
