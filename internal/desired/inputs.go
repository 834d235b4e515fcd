package desired

import (
	"fmt"
	"math"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/hatchery/hatchery/internal/placement"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

// request is what the scheduler counts of one replica.
func request(r inputs.Resources) placement.Resources {
	return placement.Resources{Memory: r.Memory, MilliCPU: int64(math.Round(r.CPUs * 1000))}
}

// decode turns a resource's resolved inputs into their type of package
// inputs, the one spec writes, strictly (inputs.Decode). Inputs that do not
// fit are the caller's bug, so retrying cannot help: the error is permanent.
func decode[T any](key string, in map[string]any) (T, error) {
	v, err := inputs.Decode[T](in)
	if err != nil {
		return v, backoff.Permanent(fmt.Errorf("%s: inputs: %w", key, err))
	}
	return v, nil
}

// duration parses a duration input; "" is zero (the contract's default).
func duration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", field, err)
	}
	return d, nil
}
