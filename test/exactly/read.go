package exactly

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
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

// DrainFailed reads and acknowledges every message of the failure queues
// of queues (<queue>.failed), at the very end: nothing consumes them any
// more.
func DrainFailed(conn *amqp.Connection, queues ...string) ([]Failed, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("drain failure queues: %w", err)
	}
	defer ch.Close()
	var out []Failed
	for _, q := range queues {
		for {
			d, ok, err := ch.Get(q+".failed", true)
			if err != nil {
				return nil, fmt.Errorf("get %s.failed: %w", q, err)
			}
			if !ok {
				break
			}
			out = append(out, Failed{Queue: q, Body: d.Body, Headers: d.Headers})
		}
	}
	return out, nil
}
