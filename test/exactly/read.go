package exactly

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Querier is what the readers need of a connection or pool (*pgx.Conn,
// *pgxpool.Pool).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ReadCounts runs query, which returns a uuid key, a row count and a sum
// (bigint) per row, into a Ledger's Got.
func ReadCounts(ctx context.Context, q Querier, query string, args ...any) (map[uuid.UUID]Count, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read counts: %w", err)
	}
	got := map[uuid.UUID]Count{}
	var k uuid.UUID
	var c Count
	if _, err := pgx.ForEachRow(rows, []any{&k, &c.Rows, &c.Sum}, func() error { got[k] = c; return nil }); err != nil {
		return nil, fmt.Errorf("read counts: %w", err)
	}
	return got, nil
}

// ReadIDs runs query, which returns one uuid per row (a service's
// processed_event ids), into a set.
func ReadIDs(ctx context.Context, q Querier, query string, args ...any) (map[uuid.UUID]bool, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read ids: %w", err)
	}
	set := map[uuid.UUID]bool{}
	var id uuid.UUID
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { set[id] = true; return nil }); err != nil {
		return nil, fmt.Errorf("read ids: %w", err)
	}
	return set, nil
}

// ReadFailed reads every row of a service database's failure store
// (platform.failed_event), in every state, oldest first; db names the
// database in problems.
func ReadFailed(ctx context.Context, q Querier, db string) ([]Failed, error) {
	rows, err := q.Query(ctx, `SELECT pool, event_id, routing_key, body, reason, error, state, attempt, copies,
		first_failed_at, failed_at FROM platform.failed_event ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("read the failure store of %s: %w", db, err)
	}
	var out []Failed
	var f Failed
	if _, err := pgx.ForEachRow(rows, []any{&f.Pool, &f.EventID, &f.RoutingKey, &f.Body, &f.Reason, &f.Error, &f.State,
		&f.Attempt, &f.Copies, &f.FirstFailedAt, &f.FailedAt}, func() error {
		f.DB = db
		out = append(out, f)
		f = Failed{}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read the failure store of %s: %w", db, err)
	}
	return out, nil
}
