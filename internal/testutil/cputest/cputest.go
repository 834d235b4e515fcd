// Package cputest times code by the CPU time the process spends on it, for
// tests that guard a ratio of two costs measured in the same run (how Diff
// scales, Compose against hatch.yaml, the ingress against a direct request).
//
// Wall time is useless for that on a machine shared with other work: a run
// of 15 ms is stretched by every process scheduled in between, one of 1 ms
// often is not, and their ratio says more about the neighbours than about
// the code. CPU time counts only what this process ran, and the fastest of
// several rounds drops the rounds that a cold cache or a collection slowed.
package cputest

import (
	"runtime"
	"syscall"
	"testing"
	"time"
)

// Time returns the CPU time (user and system, every thread: the garbage
// collector's and other goroutines' too) the process spent while f ran.
func Time(tb testing.TB, f func()) time.Duration {
	tb.Helper()
	start := used(tb)
	f()
	return used(tb) - start
}

// Fastest runs each of fs in turn, rounds times, and returns the fastest CPU
// time of each, in the order given. Each run starts after a collection, so
// that none pays for the garbage of the one before. Taking turns spreads a
// disturbance over all of them; keeping the fastest makes a ratio of two of
// them a floor that a noisy machine can only rarely raise.
func Fastest(tb testing.TB, rounds int, fs ...func()) []time.Duration {
	tb.Helper()
	best := make([]time.Duration, len(fs))
	for r := range rounds {
		for i, f := range fs {
			runtime.GC()
			if d := Time(tb, f); r == 0 || d < best[i] {
				best[i] = d
			}
		}
	}
	return best
}

func used(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
