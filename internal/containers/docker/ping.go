package docker

import (
	"context"
	"fmt"
)

// Ping asks the engine whether it answers, the cheapest call there is: the
// agent probes with it so that a frozen engine shows as unresponsive
// within seconds, rather than as a host whose containers all look fine.
func (e *Engine) Ping(ctx context.Context) error {
	if _, err := e.api.Ping(ctx); err != nil {
		return fmt.Errorf("ping the Docker Engine: %w", err)
	}
	return nil
}
