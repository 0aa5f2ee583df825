package dedup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/dbpool"
	"github.com/platformd/platformd/internal/dbutil"
	"github.com/platformd/platformd/internal/query"
)

// ErrLayoutMismatch is EnsureLayout's error when processed_event holds
// rows in another layout than the one asked for: converting it is an
// operator's decision (ConvertLayout, `platformd migrate -processed-event`).
var ErrLayoutMismatch = errors.New("processed_event layout differs from the configuration")

// EnsureLayout makes processed_event of layout want when it is empty, or
// checks that it is; for a partitioned table it then creates the
// partitions from the horizon in force (or from the oldest partition
// there, when that is newer: a day the purge dropped is never made again)
// to ahead days ahead. It is
// what migrate and run do for every service; safe to call concurrently.
func EnsureLayout(ctx context.Context, db dbpool.DB, want Layout, horizon time.Duration, ahead int) error {
	have, err := DetectLayout(ctx, db)
	if err != nil {
		return err
	}
	if have != want {
		rows, err := processedExists.One(ctx, db, query.NoParams{})
		if err != nil {
			return fmt.Errorf("dedup: ensure layout: %w", err)
		}
		if rows {
			return fmt.Errorf("dedup: processed_event is %s and holds rows, the configuration asks for %s: %w", have, want, ErrLayoutMismatch)
		}
		if _, err := ConvertLayout(ctx, db, want, ConvertParams{Horizon: horizon, Ahead: ahead}); err != nil {
			return err
		}
	}
	if want != LayoutPartitioned {
		return nil
	}
	now, err := dbNow.One(ctx, db, query.NoParams{})
	if err != nil {
		return fmt.Errorf("dedup: ensure layout: %w", err)
	}
	from := now.Add(-HorizonInForce(LayoutPartitioned, horizon))
	// Never before the oldest partition there: the days before it were
	// dropped by the purge, and a partition made again for one of them
	// would take its ids as new (a replay of an event applied then would
	// apply again). A horizon raised later lengthens only for the days
	// not dropped yet.
	parts, err := ListPartitions(ctx, db)
	if err != nil {
		return fmt.Errorf("dedup: ensure layout: %w", err)
	}
	if len(parts) > 0 && parts[0].From.After(from) {
		from = parts[0].From
	}
	ahead = cmp.Or(ahead, config.PartitionsAheadDefault)
	_, err = EnsurePartitions(ctx, db, from, now.Add(time.Duration(ahead)*PartitionWidth))
	return err
}

// ConvertParams configures ConvertLayout.
type ConvertParams struct {
	// Horizon is the service's horizon (as stored or configured; rounded
	// up to whole partitions here): v7 rows older than the horizon in
	// force are not copied into partitions, being purgeable, and no
	// partition is created for them.
	Horizon time.Duration
	// Ahead is the days of partitions created after today's (default
	// config.PartitionsAheadDefault).
	Ahead int
}

// ConvertResult reports a conversion.
type ConvertResult struct {
	// From and To are the layouts before and after.
	From, To Layout
	// Copied is the rows moved into the new table.
	Copied int64
	// Expired is the rows left behind because the purge would delete them
	// at once: v7 rows older than the oldest partition kept, and non-v7
	// rows processed before the horizon.
	Expired int64
	// Partitions is the partitions created.
	Partitions int
}

// ErrNonV7Rows is ConvertLayout's refusal to partition a table holding
// rows of ids that are not UUID v7 processed within the horizon: a
// partitioned table refuses such ids, so their events' copies would go to
// the failure queue, but dropping their rows would let a later conversion
// back to the plain table apply those copies again. Wait until they age
// out of the horizon (the plain purge deletes them), then convert.
var ErrNonV7Rows = errors.New("processed_event holds non-v7 ids inside the horizon")

// ConvertLayout converts processed_event to layout to in one transaction:
// the table is locked (ACCESS EXCLUSIVE: consumers' batches wait for the
// commit, then carry on against the new table), its rows are copied into
// a table of the new layout, which takes its name, and the old one is
// dropped. Plain to partitioned copies the v7 rows of the partitions kept
// (see ConvertParams.Horizon) and refuses with ErrNonV7Rows while non-v7
// ids processed inside the horizon remain; partitioned to plain copies
// every row. Converting to the layout the table has does nothing. A
// consumer batch longer than its statement_timeout waiting on the lock
// fails and is redelivered (nothing is lost); pause the service's pools
// for tables of millions of rows.
func ConvertLayout(ctx context.Context, db dbpool.DB, to Layout, p ConvertParams) (ConvertResult, error) {
	res := ConvertResult{To: to}
	err := dbutil.WithTx(ctx, db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		res = ConvertResult{To: to}
		if _, err := setStatementTimeout.Run(ctx, tx, statementTimeoutParams{Timeout: 0, Local: true}); err != nil {
			return err
		}
		if _, err := lockPartitions.Run(ctx, tx, query.NoParams{}); err != nil {
			return err
		}
		if _, err := lockProcessedEvent.Run(ctx, tx, query.NoParams{}); err != nil {
			return err
		}
		from, err := DetectLayout(ctx, tx)
		if err != nil {
			return err
		}
		res.From = from
		if from == to {
			return nil
		}
		if _, err := renameToOld.Run(ctx, tx, query.NoParams{}); err != nil {
			return err
		}
		switch to {
		case LayoutPlain:
			err = toPlain(ctx, tx, &res)
		case LayoutPartitioned:
			err = toPartitioned(ctx, tx, p, &res)
		default:
			err = fmt.Errorf("unknown layout %v", to)
		}
		if err != nil {
			return err
		}
		_, err = dropOld.Run(ctx, tx, query.NoParams{})
		return err
	})
	if err != nil {
		return res, fmt.Errorf("dedup: convert processed_event to %s: %w", to, err)
	}
	return res, nil
}

func toPlain(ctx context.Context, tx pgx.Tx, res *ConvertResult) error {
	if _, err := createPlain.Run(ctx, tx, query.NoParams{}); err != nil {
		return err
	}
	tag, err := copyAllFromOld.Run(ctx, tx, query.NoParams{})
	res.Copied = tag.RowsAffected()
	return err
}

func toPartitioned(ctx context.Context, tx pgx.Tx, p ConvertParams, res *ConvertResult) error {
	now, err := dbNow.One(ctx, tx, query.NoParams{})
	if err != nil {
		return err
	}
	inForce := HorizonInForce(LayoutPartitioned, p.Horizon)
	nonV7, err := countNonV7Old.One(ctx, tx, sinceParams{Since: now.Add(-p.Horizon)})
	if err != nil {
		return err
	}
	if nonV7.N > 0 {
		return fmt.Errorf("%w: %d rows, the last processed at %s, purgeable after %s (run the conversion then)",
			ErrNonV7Rows, nonV7.N, nonV7.Newest.UTC().Format(time.RFC3339), nonV7.Newest.Add(p.Horizon).UTC().Format(time.RFC3339))
	}
	if _, err := createPartitioned.Run(ctx, tx, query.NoParams{}); err != nil {
		return err
	}
	// The oldest partition kept is the one the purge would keep now; the
	// newest covers the ids of the rows (a producer's clock ahead) and the
	// days ahead.
	first := floorDay(now.Add(-inForce))
	last := now.Add(time.Duration(cmp.Or(p.Ahead, config.PartitionsAheadDefault)) * PartitionWidth)
	maxID, found, err := newestV7Old.Find(ctx, tx, beforeParams{Before: FloorUUID(now.Add(366 * 24 * time.Hour))})
	if err != nil {
		return err
	}
	if found && V7Time(maxID).After(last) {
		last = V7Time(maxID)
	}
	created, err := ensurePartitions(ctx, tx, first, last)
	if err != nil {
		return err
	}
	res.Partitions = len(created)
	tag, err := copyV7FromOld.Run(ctx, tx, idRangeParams{From: FloorUUID(first), To: FloorUUID(floorDay(last).Add(PartitionWidth))})
	if err != nil {
		return err
	}
	res.Copied = tag.RowsAffected()
	total, err := countOld.One(ctx, tx, query.NoParams{})
	if err != nil {
		return err
	}
	res.Expired = total - res.Copied
	return nil
}
