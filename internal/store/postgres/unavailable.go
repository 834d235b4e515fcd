package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hatchery/hatchery/internal/store"
)

// classify marks the errors of a database that cannot be reached (connect
// refused, connection lost, the server shutting down or starting) with
// store.ErrUnavailable, so the API answers 503 and callers retry.
func classify(err error) error {
	if err == nil || errors.Is(err, store.ErrUnavailable) {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08: connection exception; 57P01-57P03: shutting down,
		// crashed, starting up.
		if pgErr.Code[:2] == "08" || pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03" {
			return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
		return err
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	if errors.As(err, &connectErr) || errors.As(err, &netErr) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || (pgconn.SafeToRetry(err) && !errors.Is(err, context.Canceled)) {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}

// reader runs the statements outside write transactions, classifying their
// errors.
type reader struct{ pool *pgxpool.Pool }

func (r reader) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := r.pool.Query(ctx, sql, args...)
	return rows, classify(err)
}

func (r reader) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return classifiedRow{r.pool.QueryRow(ctx, sql, args...)}
}

type classifiedRow struct{ pgx.Row }

func (r classifiedRow) Scan(dest ...any) error { return classify(r.Row.Scan(dest...)) }
