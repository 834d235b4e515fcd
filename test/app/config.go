package main

import (
	"fmt"
	"strconv"
	"time"
)

// Config is what the environment asks of the app. Everything comes from
// environment variables because that is what a workload spec can set without
// building a new image: one image serves every test scenario.
type Config struct {
	// Port is the HTTP port (APP_PORT, default 8080; 0 picks a free one).
	Port int
	// Version is served by /version (APP_VERSION), so a test can tell which
	// spec a container runs.
	Version string
	// BootDelay postpones listening (APP_BOOT_DELAY, a Go duration), as a slow
	// application start does: probes fail until it has passed.
	BootDelay time.Duration
	// CrashAfter makes the process exit with status 1 this long after it
	// started serving (APP_CRASH_AFTER; zero never crashes).
	CrashAfter time.Duration
	// UnhealthyAfter turns /healthz to 503 this long after the start
	// (APP_UNHEALTHY_AFTER; zero stays healthy).
	UnhealthyAfter time.Duration
	// Job makes the app a one-shot job (APP_JOB=1): it counts one run in
	// CountFile, if set, and exits at once with JobExit (APP_JOB_EXIT, default 0).
	Job     bool
	JobExit int
	// CountFile is where /hit counts requests (APP_COUNT_FILE), typically on a
	// volume, so the count survives the container.
	CountFile string
	// Echo serves a TCP line echo on EchoPort when APP_ECHO_PORT is set (to
	// a port, or 0 for a free one).
	Echo     bool
	EchoPort int
	// IgnoreStop makes the app ignore its stop signals (APP_IGNORE_STOP=1), so
	// only a kill ends it: what a stop timeout is for.
	IgnoreStop bool
	// Tick makes the app write "tick <version> <n>" on stdout every Tick
	// (APP_TICK, a Go duration), n counting from 1: a log a test can check
	// line by line.
	Tick time.Duration
	// TickStamp adds the wall-clock time of each tick line's write, in Unix
	// nanoseconds, at its end (APP_TICK_STAMP=1): what a log latency figure
	// measures from.
	TickStamp bool
	// Escape makes the app write a line with terminal escape sequences at
	// its start (APP_ESCAPE=1).
	Escape bool
}

// ConfigFromEnv reads the configuration through getenv (os.Getenv in main, a
// map in tests). An unparsable value is an error naming the variable, never a
// silent default: a test that mistypes a duration should fail loudly.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	c := Config{Port: 8080, Version: getenv("APP_VERSION"), CountFile: getenv("APP_COUNT_FILE")}
	var err error
	intVar := func(name string, dst *int) {
		if v := getenv(name); v != "" && err == nil {
			n, perr := strconv.Atoi(v)
			if perr != nil || n < 0 {
				err = fmt.Errorf("%s=%q: want a non-negative integer", name, v)
				return
			}
			*dst = n
		}
	}
	durVar := func(name string, dst *time.Duration) {
		if v := getenv(name); v != "" && err == nil {
			d, perr := time.ParseDuration(v)
			if perr != nil || d < 0 {
				err = fmt.Errorf("%s=%q: want a non-negative duration such as 2s", name, v)
				return
			}
			*dst = d
		}
	}
	boolVar := func(name string, dst *bool) {
		if v := getenv(name); v != "" && err == nil {
			b, perr := strconv.ParseBool(v)
			if perr != nil {
				err = fmt.Errorf("%s=%q: want true or false", name, v)
				return
			}
			*dst = b
		}
	}
	intVar("APP_PORT", &c.Port)
	intVar("APP_ECHO_PORT", &c.EchoPort)
	c.Echo = getenv("APP_ECHO_PORT") != ""
	intVar("APP_JOB_EXIT", &c.JobExit)
	durVar("APP_BOOT_DELAY", &c.BootDelay)
	durVar("APP_TICK", &c.Tick)
	boolVar("APP_ESCAPE", &c.Escape)
	boolVar("APP_TICK_STAMP", &c.TickStamp)
	durVar("APP_CRASH_AFTER", &c.CrashAfter)
	durVar("APP_UNHEALTHY_AFTER", &c.UnhealthyAfter)
	boolVar("APP_JOB", &c.Job)
	boolVar("APP_IGNORE_STOP", &c.IgnoreStop)
	if err != nil {
		return Config{}, err
	}
	if c.Port > 65535 || c.EchoPort > 65535 {
		return Config{}, fmt.Errorf("port out of range: APP_PORT=%d APP_ECHO_PORT=%d", c.Port, c.EchoPort)
	}
	return c, nil
}
