package serverd

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/roster"
	"github.com/hatchery/hatchery/internal/store"
)

// newRoster makes this server's entry in the live server list: at
// --advertise-url, else at local (the URL on this machine) when --listen
// names a specific address, else nowhere (the server still lists the others).
func newRoster(reg store.ServerRegistry, cfg Config, local string, log *zap.Logger) (*roster.Roster, error) {
	advertise, err := advertiseURL(cfg.AdvertiseURL, cfg.Listen, local)
	if err != nil {
		return nil, err
	}
	id, err := serverID(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if advertise == "" {
		log.Info("this server is not in the live server list that hosts fail over with: give --advertise-url")
	}
	rcfg := roster.DefaultConfig()
	rcfg.ID, rcfg.URL, rcfg.Logger = id, advertise, log
	return roster.New(rcfg, reg)
}

// advertiseURL checks --advertise-url, or picks its default.
func advertiseURL(flag, listen, local string) (string, error) {
	if flag == "" {
		host, _, err := net.SplitHostPort(listen)
		if ip := net.ParseIP(host); err != nil || host == "" || (ip != nil && ip.IsUnspecified()) {
			return "", nil
		}
		return local, nil
	}
	u, err := url.Parse(flag)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return "", fmt.Errorf("--advertise-url %q: want https://host:port, where hosts and clients reach this server", flag)
	}
	return u.Scheme + "://" + u.Host, nil
}

// closeRoster takes this server off the live list as it stops.
func closeRoster(r *roster.Roster, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Close(ctx); err != nil {
		log.Warn("this server stays on the live server list until its registration expires", zap.Error(err))
	}
}
