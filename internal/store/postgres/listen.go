package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/store/sqlstore"
)

// Several servers share one database, and an agent long-polling one of them
// must learn at once of a desired state another wrote; an event stream on
// one must see the events of all. So a transaction that changes a desired
// state or records an event also sends a NOTIFY (delivered at its commit),
// and each store keeps one connection LISTENing, which wakes its local
// waiters. Only those commits notify, never a plain status report: NOTIFY
// serialises committing transactions on a global lock.
//
// A notification sent while the listening connection was down is lost, so
// on reconnecting the store wakes every local waiter: each re-reads what it
// waits on, which costs one read and never misses a change.

// notifyChannel is the channel every store of the database listens on.
const notifyChannel = "hatch_changes"

// listenAppName names the listening connection in pg_stat_activity.
const listenAppName = "hatch-listen"

// The kinds of change a notification names: "<store nonce>:d:<host IDs,
// comma-separated>" (host IDs hold no comma: pki's hostIDPattern),
// "<store nonce>:p" (the peer list, which wakes every host's waiters) or
// "<store nonce>:e".
const (
	changeDesired = "d"
	changePeers   = "p"
	changeEvents  = "e"
)

// maxPayload keeps a notification under PostgreSQL's limit of 8,000 bytes.
const maxPayload = 7000

// sendNotifications queues, inside tx, the notifications of what tx changed:
// the hosts of one apply in as few notifications as fit.
func (s *Store) sendNotifications(ctx context.Context, tx *txn) error {
	var payloads []string
	if tx.AllHosts {
		payloads = append(payloads, s.nonce+":"+changePeers)
	} else {
		prefix := s.nonce + ":" + changeDesired + ":"
		var ids []string
		size := 0
		for _, h := range tx.Hosts {
			if len(ids) > 0 && size+1+len(h) > maxPayload-len(prefix) {
				payloads, ids, size = append(payloads, prefix+strings.Join(ids, ",")), nil, 0
			}
			ids, size = append(ids, h), size+1+len(h)
		}
		if len(ids) > 0 {
			payloads = append(payloads, prefix+strings.Join(ids, ","))
		}
	}
	if tx.Events {
		payloads = append(payloads, s.nonce+":"+changeEvents)
	}
	for _, p := range payloads {
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, notifyChannel, p); err != nil {
			return fmt.Errorf("notify: %w", err)
		}
	}
	return nil
}

// dispatch wakes the local waiters of another store's change; this store's
// own were woken when it committed.
func (s *Store) dispatch(payload string) {
	parts := strings.SplitN(payload, ":", 3)
	if len(parts) < 2 || parts[0] == s.nonce {
		return
	}
	switch {
	case parts[1] == changeDesired && len(parts) == 3:
		s.Wake(sqlstore.Changes{Hosts: strings.Split(parts[2], ",")})
	case parts[1] == changePeers:
		s.Wake(sqlstore.Changes{AllHosts: true})
	case parts[1] == changeEvents:
		s.Wake(sqlstore.Changes{Events: true})
	}
}

// startListening connects the listening connection and runs it until ctx
// ends, reconnecting with back-off when it breaks. It returns once the first
// LISTEN is in place, or its error.
func (s *Store) startListening(ctx context.Context, cfg *pgx.ConnConfig) error {
	cfg = cfg.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = listenAppName
	conn, err := listenOn(ctx, cfg)
	if err != nil {
		return err
	}
	lctx, cancel := context.WithCancel(context.Background())
	s.stopListening = cancel
	s.listenDone = make(chan struct{})
	go func() {
		defer close(s.listenDone)
		s.listen(lctx, cfg, conn)
	}()
	return nil
}

func listenOn(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	if _, err := conn.Exec(ctx, `LISTEN `+notifyChannel); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("listen: %w", err)
	}
	return conn, nil
}

// The back-off between attempts to reconnect the listening connection.
const (
	relistenMin = 50 * time.Millisecond
	relistenMax = 5 * time.Second
)

// listen is the listening connection's loop: one goroutine, owned by the
// store (Close ends it).
func (s *Store) listen(ctx context.Context, cfg *pgx.ConnConfig, conn *pgx.Conn) {
	backoff := relistenMin
	for {
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				break
			}
			s.dispatch(n.Payload)
		}
		conn.Close(context.Background())
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("the listening connection broke: reconnecting; changes of other servers wait until then")
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			var err error
			if conn, err = listenOn(ctx, cfg); err == nil {
				break
			}
			backoff = min(2*backoff, relistenMax)
			s.log.Warn("listening connection not back yet", zap.Error(err), zap.Duration("retry_in", backoff))
		}
		backoff = relistenMin
		// What other servers changed while we were away was not heard.
		s.WakeAll()
		s.log.Info("listening again: every waiter woken to re-read")
	}
}
