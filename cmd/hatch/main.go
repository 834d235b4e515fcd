// Command hatch is Hatchery's one binary: control plane, host agent and CLI.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/hatchery/hatchery/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// The first signal asks for a graceful stop; forgetting the handler
		// then lets a second one end a command that does not stop in time.
		<-ctx.Done()
		stop()
	}()
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
