package dedup

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/internal/dbutil"
	"github.com/platformd/platformd/internal/query"
)

// partitionLockName is the advisory lock partition maintenance runs under
// (advisory locks are per database: one lock per service database). A
// session takes it around a purge of partitions, a transaction around
// creating them; the two are the same key, so they exclude each other.
const partitionLockName = "platformd.processed_event.partitions"

// Partition is one partition of a partitioned processed_event: the ids of
// UUID v7 time in [From, To).
type Partition struct {
	// Name is the table's name: processed_event_pYYYYMMDD.
	Name string
	// From and To bound the ids' time (To excluded).
	From, To time.Time
	// DetachPending is true when a DETACH PARTITION CONCURRENTLY was
	// interrupted: the partition is no longer used and must be finalized.
	DetachPending bool
}

// partitionName is the name of the partition of day (UTC).
func partitionName(day time.Time) string {
	return "processed_event_p" + day.UTC().Format("20060102")
}

// partitionNameRE matches partition names and captures their day.
var partitionNameRE = regexp.MustCompile(`^processed_event_p(\d{8})$`)

// boundRE reads pg_get_expr(relpartbound) of a range partition on uuid.
var boundRE = regexp.MustCompile(`^FOR VALUES FROM \('([0-9a-f-]{36})'\) TO \('([0-9a-f-]{36})'\)$`)

// floorDay is t's UTC day.
func floorDay(t time.Time) time.Time { return t.UTC().Truncate(PartitionWidth) }

// ListPartitions returns processed_event's partitions, oldest first. It is
// safe for concurrent use.
func ListPartitions(ctx context.Context, db query.Querier) ([]Partition, error) {
	var out []Partition
	err := listPartitions.Each(ctx, db, query.NoParams{}, func(r partitionRow) error {
		m := boundRE.FindStringSubmatch(r.Bound)
		if m == nil {
			return fmt.Errorf("partition %s: unexpected bound %q", r.Name, r.Bound)
		}
		from, to := uuid.MustParse(m[1]), uuid.MustParse(m[2])
		out = append(out, Partition{Name: r.Name, From: V7Time(from).UTC(), To: V7Time(to).UTC(), DetachPending: r.DetachPending})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dedup: list partitions: %w", err)
	}
	slices.SortFunc(out, func(a, b Partition) int { return a.From.Compare(b.From) })
	return out, nil
}

// PartitionSpan returns the time range the attached partitions cover,
// from the oldest's From to the newest's To (gaps included), and false
// when there is none.
func PartitionSpan(ctx context.Context, db query.Querier) (from, to time.Time, ok bool, err error) {
	parts, err := ListPartitions(ctx, db)
	if err != nil {
		return from, to, false, err
	}
	for _, p := range parts {
		if p.DetachPending {
			continue
		}
		if !ok || p.From.Before(from) {
			from = p.From
		}
		if !ok || p.To.After(to) {
			to = p.To
		}
		ok = true
	}
	return from, to, ok, nil
}

// EnsurePartitions creates the daily partitions missing between from's
// day and to's (both included), under the partition lock, and returns the
// names it created. A day the purge dropped must not be made again (its
// ids would be taken as new): callers other than a conversion start at the
// oldest partition there, as EnsureLayout does. Each partition is created as a table of its own and
// then attached: ATTACH PARTITION takes SHARE UPDATE EXCLUSIVE on the
// parent, which consumers' inserts (ROW EXCLUSIVE) do not wait for, where
// CREATE TABLE ... PARTITION OF would lock them out. Safe to call from
// several daemons at once.
func EnsurePartitions(ctx context.Context, db dbutil.TxStarter, from, to time.Time) ([]string, error) {
	var created []string
	err := dbutil.WithTx(ctx, db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := lockPartitions.Run(ctx, tx, query.NoParams{}); err != nil {
			return err
		}
		var err error
		created, err = ensurePartitions(ctx, tx, from, to)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dedup: ensure partitions: %w", err)
	}
	return created, nil
}

// ensurePartitions is EnsurePartitions' work, in tx, which holds the
// partition lock.
func ensurePartitions(ctx context.Context, tx pgx.Tx, from, to time.Time) ([]string, error) {
	parts, err := ListPartitions(ctx, tx)
	if err != nil {
		return nil, err
	}
	var created []string
	for day := floorDay(from); !day.After(floorDay(to)); day = day.Add(PartitionWidth) {
		end := day.Add(PartitionWidth)
		if slices.ContainsFunc(parts, func(p Partition) bool { return p.From.Before(end) && p.To.After(day) }) {
			continue
		}
		name := partitionName(day)
		if _, err := createPartition.Run(ctx, tx, partitionParams{Name: name}); err != nil {
			return nil, fmt.Errorf("partition %s: %w", name, err)
		}
		if _, err := attachPartition.Run(ctx, tx, attachParams{Name: name, From: FloorUUID(day), To: FloorUUID(end)}); err != nil {
			return nil, fmt.Errorf("partition %s: %w", name, err)
		}
		created = append(created, name)
	}
	return created, nil
}

// PurgeableAt is when a processed_event row of the given layout may be
// purged: processed_at plus the horizon for the plain table; for a
// partitioned one, the end of its id's partition plus the horizon in force.
func PurgeableAt(l Layout, id uuid.UUID, processedAt time.Time, horizon time.Duration) time.Time {
	if l != LayoutPartitioned {
		return processedAt.Add(horizon)
	}
	return floorDay(V7Time(id)).Add(PartitionWidth + HorizonInForce(l, horizon))
}
