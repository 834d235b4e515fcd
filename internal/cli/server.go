package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/hatchery/hatchery/internal/blob"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/seal"
	"github.com/hatchery/hatchery/internal/server"
	"github.com/hatchery/hatchery/internal/store/sqlite"
)

type serverOptions struct {
	listen   string
	dataDir  string
	store    string
	liveness time.Duration
}

func newServerCmd() *cobra.Command {
	var opts serverOptions
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the control plane",
		Long: `Run the control plane: the API agents pull their desired state from and report
to, and the CLI talks to. At first start it makes an admin token, prints it once
and writes it to <data-dir>/admin-token (mode 0600). SIGINT or SIGTERM shut it
down gracefully.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServer(cmd.Context(), opts, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.listen, "listen", ":7700", "address to serve the API on")
	f.StringVar(&opts.dataDir, "data-dir", "./hatch-data", "directory for the database, blobs, keys and the admin token")
	f.StringVar(&opts.store, "store", "", "store: sqlite:<path> (default sqlite:<data-dir>/hatch.db)")
	f.DurationVar(&opts.liveness, "liveness-timeout", server.DefaultConfig().LivenessTimeout,
		"how long a host may go without a report before it is marked down")
	return cmd
}

// sqlitePath returns the database file the --store flag names.
func sqlitePath(storeFlag, dataDir string) (string, error) {
	switch {
	case storeFlag == "":
		return filepath.Join(dataDir, "hatch.db"), nil
	case strings.HasPrefix(storeFlag, "sqlite:") && len(storeFlag) > len("sqlite:"):
		return strings.TrimPrefix(storeFlag, "sqlite:"), nil
	case strings.HasPrefix(storeFlag, "postgres://"), strings.HasPrefix(storeFlag, "postgresql://"):
		// The URL is not repeated: it may hold a password.
		return "", errors.New("--store postgres://...: the PostgreSQL store is not available yet; use sqlite:<path>")
	}
	return "", fmt.Errorf("--store %q: want sqlite:<path>", storeFlag)
}

func runServer(ctx context.Context, opts serverOptions, stdout, stderr io.Writer) error {
	cfg := server.DefaultConfig()
	cfg.LivenessTimeout = opts.liveness
	if err := cfg.Validate(); err != nil {
		return err
	}
	dbPath, err := sqlitePath(opts.store, opts.dataDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(opts.dataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	log := newServerLogger(stderr)
	defer func() { _ = log.Sync() }() // stderr may not support sync

	st, err := sqlite.Open(ctx, dbPath, log)
	if err != nil {
		return err
	}
	defer st.Close()
	blobs, err := blob.Open(filepath.Join(opts.dataDir, "blobs"))
	if err != nil {
		return err
	}
	box, err := seal.LoadOrCreate(filepath.Join(opts.dataDir, "seal.key"))
	if err != nil {
		return err
	}
	// The CA's fingerprint goes into every token, so that clients can pin the
	// server once it serves TLS.
	tlsMaterial, err := pki.LoadOrCreate(filepath.Join(opts.dataDir, "tls"), pki.DefaultNames(), time.Now())
	if err != nil {
		return err
	}
	tokenPath := filepath.Join(opts.dataDir, "admin-token")
	hash, fresh, err := server.EnsureAdminToken(ctx, st, tokenPath, tlsMaterial.Fingerprint(), time.Now())
	if err != nil {
		return err
	}
	if fresh != "" {
		fmt.Fprintf(stdout, "admin token (shown once, kept in %s):\n  %s\n", tokenPath, fresh)
	}
	srv, err := server.New(cfg, server.Deps{
		Liveness: st, Statuses: st, Desired: st, Events: st, Retention: st, Applies: st, Projects: st,
		Blobs: blobs, Box: box, Auth: server.NewAdminToken(hash), Logger: log,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", opts.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	fmt.Fprintf(stdout, "hatch server listening on %s\n", ln.Addr())
	if err := srv.Serve(ctx, ln); err != nil {
		return err
	}
	log.Info("server stopped")
	return nil
}

// newServerLogger logs JSON lines at info level to w.
func newServerLogger(w io.Writer) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	return zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(w), zap.InfoLevel))
}
