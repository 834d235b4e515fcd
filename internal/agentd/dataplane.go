package agentd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/dataplane"
)

// dataPlaneConfig is the data plane's share of the agent's Config.
func dataPlaneConfig(opts Config, hostID string) dataplane.Config {
	return dataplane.Config{
		DataDir: opts.DataDir, HostID: hostID,
		IngressAddr: opts.IngressAddr, HTTPSAddr: opts.HTTPSAddr, AdminAddr: opts.AdminAddr, PublishAddr: opts.PublishAddr,
		TrustedProxies: opts.TrustedProxies, HoldTimeout: opts.HoldTimeout, MeshAddr: opts.MeshAddr,
	}
}

// superviseEvery is how often the agent checks that its data plane answers.
const superviseEvery = 2 * time.Second

// startDataPlane returns the Client of the host's data plane, and what to
// call as the agent stops: a data plane of its own (dataplane.Ensure) is
// left running, and started again meanwhile if it stops answering (see
// superviseDataPlane; wake then makes the agent feed it); one in this
// process (Config.InProcessDataPlane) is stopped, its requests finishing.
func startDataPlane(ctx context.Context, opts Config, hostID string, wake func(), log *zap.Logger) (*dataplane.Client, func(), error) {
	cfg := dataPlaneConfig(opts, hostID)
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("find the hatch binary: %w", err)
	}
	if !opts.InProcessDataPlane {
		c, err := dataplane.Ensure(ctx, cfg, exe, log)
		if err != nil {
			return nil, nil, err
		}
		life, stop := context.WithCancel(context.Background())
		supervised := make(chan struct{})
		go func() {
			defer close(supervised)
			superviseDataPlane(life, c, func(ctx context.Context) error {
				again, err := dataplane.Ensure(ctx, cfg, exe, log)
				if err == nil {
					again.Close() // c reaches the new one: it dials the socket at each call
				}
				return err
			}, wake, log)
		}()
		return c, func() { stop(); <-supervised; c.Close() }, nil
	}
	hash, err := dataplane.BinaryHash(exe)
	if err != nil {
		return nil, nil, err
	}
	life, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- dataplane.Serve(life, cfg, hash, false, log) }()
	c := dataplane.NewClient(opts.DataDir, log)
	stopAll := func() {
		c.Close()
		stop()
		if err := <-served; err != nil {
			log.Warn("close data plane", zap.Error(err))
		}
	}
	if err := waitServing(ctx, c, served); err != nil {
		c.Close()
		stop()
		return nil, nil, err
	}
	return c, stopAll, nil
}

// superviseDataPlane starts the data plane again (ensure) when it stops
// answering while the agent runs (killed, out of memory), then wakes the
// agent, whose next converge gives it the table; until ctx ends.
func superviseDataPlane(ctx context.Context, c *dataplane.Client, ensure func(context.Context) error, wake func(), log *zap.Logger) {
	t := time.NewTicker(superviseEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		check, cancel := context.WithTimeout(ctx, superviseEvery)
		_, err := c.Version(check)
		cancel()
		if err == nil || ctx.Err() != nil {
			continue
		}
		log.Error("the data plane does not answer: starting it again", zap.Error(err))
		if err := ensure(ctx); err != nil {
			log.Error("the data plane could not be started again: retrying", zap.Error(err))
			continue
		}
		wake()
	}
}

// waitServing waits until the data plane in this process answers, or
// fails to start.
func waitServing(ctx context.Context, c *dataplane.Client, served <-chan error) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if _, err := c.Version(ctx); err == nil {
			return nil
		}
		select {
		case err := <-served:
			if err == nil {
				err = errors.New("it stopped")
			}
			return fmt.Errorf("data plane: %w", err)
		case <-ctx.Done():
			return fmt.Errorf("data plane: not serving: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
