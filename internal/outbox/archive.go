package outbox

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/internal/dbutil"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/query"
	"github.com/platformd/platformd/internal/startstop"
)

// ArchiveWidth is the time range of one partition of platform.outbox_archive
// (a UTC day of published_at).
const ArchiveWidth = 24 * time.Hour

// ArchiveAheadDefault is how many days of archive partitions after today's
// EnsureArchivePartitions keeps created.
const ArchiveAheadDefault = 2

// archiveLockName is the advisory lock creating and dropping archive
// partitions run under (per database, transaction-scoped).
const archiveLockName = "platformd.outbox_archive.partitions"

// archiveDropLockTimeout bounds the wait for the parent's lock when a
// partition is dropped; past it the drop is left to the next run.
const archiveDropLockTimeout = 5 * time.Second

// archivePartRE matches archive partition names and captures their day.
var archivePartRE = regexp.MustCompile(`^outbox_archive_p(\d{8})$`)

// archivePartName is the name of the partition of day (UTC).
func archivePartName(day time.Time) string {
	return "outbox_archive_p" + day.UTC().Format("20060102")
}

// archiveParts returns the days of the archive's partitions.
func archiveParts(ctx context.Context, tx pgx.Tx) (map[time.Time]bool, error) {
	names, err := listArchivePartitions.All(ctx, tx, query.NoParams{})
	if err != nil {
		return nil, fmt.Errorf("list archive partitions: %w", err)
	}
	days := make(map[time.Time]bool, len(names))
	for _, n := range names {
		m := archivePartRE.FindStringSubmatch(n)
		if m == nil {
			continue // not ours: left alone
		}
		day, err := time.Parse("20060102", m[1])
		if err != nil {
			continue
		}
		days[day] = true
	}
	return days, nil
}

// EnsureArchivePartitions creates the archive's daily partitions missing
// from today (database clock, UTC) to ahead days after it, and returns the
// last day covered (its end). Each is created as a table, then attached
// (SHARE UPDATE EXCLUSIVE on the parent: the relay's inserts do not wait).
// Safe to call from several daemons at once.
func EnsureArchivePartitions(ctx context.Context, db dbutil.TxStarter, ahead int) (time.Time, error) {
	var until time.Time
	err := dbutil.WithTx(ctx, db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := lockArchivePartitions.Run(ctx, tx, query.NoParams{}); err != nil {
			return err
		}
		now, err := dbNow.One(ctx, tx, query.NoParams{})
		if err != nil {
			return err
		}
		days, err := archiveParts(ctx, tx)
		if err != nil {
			return err
		}
		today := now.UTC().Truncate(ArchiveWidth)
		for i := 0; i <= ahead; i++ {
			day := today.Add(time.Duration(i) * ArchiveWidth)
			until = day.Add(ArchiveWidth)
			if days[day] {
				continue
			}
			name := partIdent(day)
			if _, err := createArchivePartition.Run(ctx, tx, partParams{Ident: name}); err != nil {
				return fmt.Errorf("create archive partition %s: %w", name, err)
			}
			// Rows of that day already in the default partition move in
			// first: the attach refuses a default partition holding any.
			dp := dayParams{Ident: name, From: day, To: until}
			if _, err := moveDefaultRows.Run(ctx, tx, dp); err != nil {
				return fmt.Errorf("move default rows to archive partition %s: %w", name, err)
			}
			if _, err := attachArchivePartition.Run(ctx, tx, dp); err != nil {
				return fmt.Errorf("attach archive partition %s: %w", name, err)
			}
		}
		return nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("outbox: ensure archive partitions: %w", err)
	}
	return until, nil
}

// ArchivePurgeResult is what PurgeArchive did.
type ArchivePurgeResult struct {
	// Cutoff is now() minus the period: rows published before it are gone.
	Cutoff time.Time
	// Dropped names the partitions dropped.
	Dropped []string
	// Rows counts the rows of the partitions dropped (pg_class.reltuples
	// when analyzed, else exact) and those deleted from the default
	// partition.
	Rows int64
	// Trimmed counts the rows deleted from the partition whose day holds
	// the cutoff.
	Trimmed int64
}

// ArchiveTrimBatch is the most rows one DELETE removes from the
// partition that straddles the cutoff.
const ArchiveTrimBatch = 10_000

// archiveTrimTimeout bounds one batch of the trim.
const archiveTrimTimeout = 30 * time.Second

// PurgeArchive removes every archived row published before now() minus
// keep (database clock), and nothing else: it drops the partitions whose
// whole day is past that cutoff (one DROP TABLE per day, whatever its
// rows), deletes the default partition's rows past it, and deletes those
// of the one partition whose day holds the cutoff in batches of
// ArchiveTrimBatch rows, each its own transaction (by the index on
// published_at: the cost follows the rows removed). A drop that cannot
// take the parent's lock within a few seconds (a long replay read) is left
// to the next run; so is a trim that ctx ends, the rows it removed staying
// removed. Safe to call from several daemons at once.
func PurgeArchive(ctx context.Context, db dbutil.TxStarter, keep time.Duration) (ArchivePurgeResult, error) {
	return purgeArchive(ctx, db, keep, ArchiveTrimBatch)
}

func purgeArchive(ctx context.Context, db dbutil.TxStarter, keep time.Duration, batch int) (ArchivePurgeResult, error) {
	var res ArchivePurgeResult
	var straddling bool
	err := dbutil.WithTx(ctx, db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := lockArchivePartitions.Run(ctx, tx, query.NoParams{}); err != nil {
			return err
		}
		var err error
		if res.Cutoff, err = archiveCutoff.One(ctx, tx, keepParams{Keep: keep}); err != nil {
			return err
		}
		days, err := archiveParts(ctx, tx)
		if err != nil {
			return err
		}
		if _, err := setLockTimeout.Run(ctx, tx, archiveDropLockTimeout); err != nil {
			return err
		}
		straddling = days[res.Cutoff.UTC().Truncate(ArchiveWidth)]
		for day := range days {
			if day.Add(ArchiveWidth).After(res.Cutoff) {
				continue
			}
			pp := partParams{Ident: partIdent(day)}
			name := pp.Ident
			n, err := partitionReltuples.One(ctx, tx, pp)
			if err != nil {
				if n, err = countArchivePartition.One(ctx, tx, pp); err != nil {
					return fmt.Errorf("count %s: %w", name, err)
				}
			}
			if _, err := dropArchivePartition.Run(ctx, tx, pp); err != nil {
				return fmt.Errorf("drop archive partition %s: %w", name, err)
			}
			res.Dropped = append(res.Dropped, archivePartName(day))
			res.Rows += n
		}
		// The default partition holds few rows (days without their
		// partition): those past the period go row by row.
		tag, err := trimArchiveDefault.Run(ctx, tx, cutoffParams{Cutoff: res.Cutoff})
		if err != nil {
			return fmt.Errorf("trim the archive's default partition: %w", err)
		}
		res.Rows += tag.RowsAffected()
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("outbox: purge archive: %w", err)
	}
	if straddling {
		n, err := trimArchive(ctx, db, res.Cutoff, batch)
		res.Trimmed = n
		if err != nil {
			return res, fmt.Errorf("outbox: purge archive: %w", err)
		}
	}
	return res, nil
}

// trimArchive deletes the rows published before cutoff from the partition
// of cutoff's day, in batches of at most batch rows (each its own
// transaction, under the partitions' lock, so that a drop of the same
// partition waits for it), until a batch comes back short.
func trimArchive(ctx context.Context, db dbutil.TxStarter, cutoff time.Time, batch int) (int64, error) {
	day := cutoff.UTC().Truncate(ArchiveWidth)
	name := partIdent(day)
	from := day
	var total int64
	for {
		var t trimRow
		bctx, cancel := context.WithTimeout(ctx, archiveTrimTimeout)
		err := dbutil.WithTx(bctx, db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := lockArchivePartitions.Run(ctx, tx, query.NoParams{}); err != nil {
				return err
			}
			exists, err := archivePartitionExists.One(ctx, tx, partParams{Ident: name})
			if err != nil || !exists {
				return err // dropped meanwhile: nothing left to trim
			}
			t, err = trimArchivePartition.One(ctx, tx, trimParams{Ident: name, From: from, Cutoff: cutoff, Limit: batch})
			return err
		})
		cancel()
		if err != nil {
			return total, fmt.Errorf("trim archive partition %s: %w", name, err)
		}
		total += t.N
		if t.N < int64(batch) || t.Last == nil {
			return total, nil
		}
		from = *t.Last
		// A short pause between batches leaves room to the relay's
		// archive writes and to autovacuum.
		if !startstop.Sleep(ctx, startstop.Jitter(10*time.Millisecond)) {
			return total, ctx.Err()
		}
	}
}

// ArchivedMessage returns the message of an archived row exactly as the
// relay published it (envelope body, persistent, application/json, the
// row's headers); payload and headers are the jsonb as PostgreSQL renders
// it. A replay adds its own headers to the result.
func ArchivedMessage(id uuid.UUID, name string, occurredAt time.Time, payload, headers string, maxBody int) (amqp.Publishing, error) {
	return row{id: id, name: name, occurredAt: occurredAt, finite: true, payload: payload, headers: headers}.message(cmp.Or(maxBody, envelope.DefaultMaxBodyBytes))
}
