package dataplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/fsutil"
)

// startWait bounds how long Ensure waits for a data plane it started (or
// upgraded) to answer on the socket.
const startWait = 30 * time.Second

// Ensure makes dataDir's data plane serve cfg from the binary at exe, and
// returns its Client:
//   - one that runs exe's binary with cfg is adopted as it is: it serves
//     the table the last agent gave it until this agent sends its own;
//   - one that runs another binary with cfg is upgraded in place: exe
//     takes its listeners over (see the package doc), no connection
//     refused;
//   - one with another Config is stopped (its requests finish), and a new
//     one started: an address cannot be handed over;
//   - none: a new one is started, detached (its own session), so that it
//     outlives this agent.
func Ensure(ctx context.Context, cfg Config, exe string, log *zap.Logger) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("data plane config: %w", err)
	}
	hash, err := BinaryHash(exe)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("data plane config: %w", err)
	}
	if err := keepConfig(cfg.DataDir, b); err != nil {
		return nil, err
	}
	c := NewClient(cfg.DataDir, log)
	v, err := c.Version(ctx)
	switch {
	case err != nil:
		log.Info("no data plane answers: starting one", zap.NamedError("reason", err))
		err = spawn(ctx, c, exe, hash, cfg.DataDir, false)
	case !sameConfig(v.Config, cfg):
		log.Warn("the running data plane serves other settings: it is stopped and a new one started (connections are refused meanwhile)",
			zap.Int("pid", v.PID))
		if err = stopAndWait(ctx, c, cfg.DataDir); err == nil {
			err = spawn(ctx, c, exe, hash, cfg.DataDir, false)
		}
	case v.Binary != hash:
		log.Info("the running data plane is another binary's: upgrading it in place", zap.Int("pid", v.PID),
			zap.String("from", short(v.Binary)), zap.String("to", short(hash)))
		err = spawn(ctx, c, exe, hash, cfg.DataDir, true)
	default:
		log.Info("adopted the running data plane", zap.Int("pid", v.PID))
	}
	// Connections kept from the questions asked while a predecessor
	// answered would reach it, not its successor.
	c.Close()
	if err != nil {
		return nil, err
	}
	return c, nil
}

// keepConfig writes the Config a data plane it starts reads, unless the
// file holds it already: an agent restarted on a full disk (its data dir on
// a small tmpfs, say) adopts the data plane it had without writing a byte.
func keepConfig(dataDir string, b []byte) error {
	path := filepath.Join(dataDir, configFile)
	if kept, err := os.ReadFile(path); err == nil && bytes.Equal(kept, b) {
		return nil
	}
	if err := fsutil.WriteFileAtomic(path, b, 0o600); err != nil {
		return fmt.Errorf("keep the data plane config: %w", err)
	}
	return nil
}

// spawn starts `exe dataplane --data-dir D` (with --take-over to upgrade)
// in a session of its own, logging to LogPath, and waits until it answers
// with hash. It is reaped by this process while it lives, by init after.
func spawn(ctx context.Context, c *Client, exe, hash, dataDir string, takeOver bool) error {
	logf, err := os.OpenFile(LogPath(dataDir), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("data plane log: %w", err)
	}
	defer logf.Close() // the child has its own copy
	args := []string{"dataplane", "--data-dir", dataDir}
	if takeOver {
		args = append(args, "--take-over")
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the data plane: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	ctx, cancel := context.WithTimeout(ctx, startWait)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if v, err := c.Version(ctx); err == nil && v.Binary == hash && v.PID == cmd.Process.Pid {
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("the data plane exited at its start (%v): see %s", err, LogPath(dataDir))
		case <-ctx.Done():
			return fmt.Errorf("the data plane did not answer within %s: see %s", startWait, LogPath(dataDir))
		case <-t.C:
		}
	}
}

// Stop stops dataDir's data plane for good (`hatch agent stop-dataplane`)
// and waits until it has exited; stopped is false when none ran.
func Stop(ctx context.Context, dataDir string, log *zap.Logger) (stopped bool, err error) {
	c := NewClient(dataDir, log)
	defer c.Close()
	if _, err := c.Version(ctx); err != nil {
		if running(dataDir) {
			return false, fmt.Errorf("a data plane holds %s but does not answer on %s: %w", filepath.Join(dataDir, lockFile), SocketPath(dataDir), err)
		}
		return false, nil
	}
	return true, stopAndWait(ctx, c, dataDir)
}

// stopAndWait tells the data plane to stop and waits for its lock to be
// free: then it has exited.
func stopAndWait(ctx context.Context, c *Client, dataDir string) error {
	if err := c.Stop(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, DrainTimeout+5*time.Second)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for running(dataDir) {
		select {
		case <-ctx.Done():
			return errors.New("the data plane did not exit in time")
		case <-t.C:
		}
	}
	return nil
}

// RunProcess is `hatch dataplane`: it serves the Config the agent wrote to
// dataDir until ctx ends or it stops (see Serve).
func RunProcess(ctx context.Context, dataDir string, takeOver bool, log *zap.Logger) error {
	b, err := os.ReadFile(filepath.Join(dataDir, configFile))
	if err != nil {
		return fmt.Errorf("data plane config (written by `hatch agent`): %w", err)
	}
	var cfg Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("data plane config %s: %w", filepath.Join(dataDir, configFile), err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the hatch binary: %w", err)
	}
	hash, err := BinaryHash(exe)
	if err != nil {
		return err
	}
	return Serve(ctx, cfg, hash, takeOver, log.With(zap.String("component", "dataplane"), zap.String("host", cfg.HostID)))
}

// sameConfig compares two Configs as they travel (a nil and an empty list
// are the same).
func sameConfig(a, b Config) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

func short(hash string) string { return hash[:min(12, len(hash))] }
