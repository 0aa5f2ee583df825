package dedup

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// EstimateRows returns an estimate of the rows in processed_event without
// scanning it: the statistics collector's live-row count, else the
// planner's reltuples, else -1 when the table was never counted (a fresh
// table before its first analyze). It is cheap enough to call on every
// page refresh and safe for concurrent use.
func EstimateRows(ctx context.Context, db *pgxpool.Pool) (int64, error) {
	var reltuples float64
	var live *int64
	err := db.QueryRow(ctx, `SELECT c.reltuples, s.n_live_tup
		FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
		WHERE c.oid = 'processed_event'::regclass`).Scan(&reltuples, &live)
	if err != nil {
		return 0, fmt.Errorf("dedup: estimate processed_event rows: %w", err)
	}
	switch {
	case live != nil && (*live > 0 || reltuples >= 0):
		// n_live_tup follows inserts and deletes as they commit; reltuples
		// only moves with vacuum and analyze.
		return *live, nil
	case reltuples >= 0:
		return int64(reltuples), nil
	default:
		return -1, nil
	}
}
