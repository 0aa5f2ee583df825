package state

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/internal/dbpool"
	"github.com/platformd/platformd/internal/query"
)

// Purge triggers (PurgeRun.Trigger).
const (
	// TriggerSchedule is a run started by the scheduler's periodic job.
	TriggerSchedule = "schedule"
	// TriggerAdmin is a run asked for through the admin API.
	TriggerAdmin = "admin"
)

// ListPurgeRunsLimitDefault is the number of runs ListPurgeRuns returns
// when limit is not positive.
const ListPurgeRunsLimitDefault = 20

// PurgeRunsKeepDefault is how many finished runs per service the purge
// history keeps (about ten days at one run every 15 minutes).
const PurgeRunsKeepDefault = 1000

// ErrPurgeRunNotFound is FinishPurgeRun's error for an id that is unknown
// or already finished.
var ErrPurgeRunNotFound = errors.New("purge run not found or already finished")

// PurgeRun is one purge of a service's processed_event table, as recorded
// in platform.purge_run. Times are by the database clock.
type PurgeRun struct {
	// ID identifies the run.
	ID int64
	// Service is the purged service's name.
	Service string
	// Trigger is TriggerSchedule or TriggerAdmin.
	Trigger string
	// DryRun is true when the run only counted the rows it would delete.
	DryRun bool
	// StartedAt is when the run started.
	StartedAt time.Time
	// FinishedAt is when it finished; zero while it runs.
	FinishedAt time.Time
	// Cutoff is the instant before which rows were purged; zero if the run
	// failed before computing it.
	Cutoff time.Time
	// Deleted is the number of rows deleted (for a dry run, that would be).
	Deleted int64
	// Error is the text of the error that ended the run; empty on success.
	Error string
	// Daemon identifies the daemon instance that ran it.
	Daemon string
}

// StartPurgeRun records the start of a purge of service (started_at is the
// database's now()) and returns the run's id. trigger is TriggerSchedule or
// TriggerAdmin; daemon identifies the daemon instance running it.
func StartPurgeRun(ctx context.Context, db dbpool.DB, service, trigger string, dryRun bool, daemon string) (int64, error) {
	if trigger != TriggerSchedule && trigger != TriggerAdmin {
		return 0, fmt.Errorf("state: start purge run of %s: unknown trigger %q", service, trigger)
	}
	id, err := insertPurgeRun.One(ctx, db, startPurgeRunParams{Service: service, Trigger: trigger, DryRun: dryRun, Daemon: daemon})
	if err != nil {
		return 0, fmt.Errorf("state: start purge run of %s: %w", service, err)
	}
	return id, nil
}

// FinishPurgeRun records the end of run id (finished_at is the database's
// clock_timestamp()) with its cutoff (NULL when zero), the rows deleted and
// runErr's text (NULL when nil), and returns the finished run. A run that is
// unknown or already finished is ErrPurgeRunNotFound.
func FinishPurgeRun(ctx context.Context, db dbpool.DB, id int64, cutoff time.Time, deleted int64, runErr error) (PurgeRun, error) {
	var (
		c       *time.Time
		errText *string
	)
	if !cutoff.IsZero() {
		c = &cutoff
	}
	if runErr != nil {
		s := runErr.Error()
		errText = &s
	}
	r, err := finishPurgeRun.One(ctx, db, finishPurgeRunParams{ID: id, Cutoff: c, Deleted: deleted, Error: errText})
	if errors.Is(err, pgx.ErrNoRows) {
		return PurgeRun{}, fmt.Errorf("state: finish purge run %d: %w", id, ErrPurgeRunNotFound)
	}
	if err != nil {
		return PurgeRun{}, fmt.Errorf("state: finish purge run %d: %w", id, err)
	}
	return r.run(), nil
}

// ListPurgeRuns returns at most limit runs of service (ListPurgeRunsLimitDefault
// when limit is not positive), newest first, running ones included.
func ListPurgeRuns(ctx context.Context, db dbpool.DB, service string, limit int) ([]PurgeRun, error) {
	if limit <= 0 {
		limit = ListPurgeRunsLimitDefault
	}
	runs := []PurgeRun{} // empty, not nil, as before: a JSON list
	err := listPurgeRuns.Each(ctx, db, servicePageParams{Service: service, Limit: limit}, func(r purgeRunRow) error {
		runs = append(runs, r.run())
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("state: list purge runs of %s: %w", service, err)
	}
	return runs, nil
}

// LastPurge returns the last finished, successful run of service that
// deleted (not a dry run), by finish time; false when there is none.
func LastPurge(ctx context.Context, db dbpool.DB, service string) (PurgeRun, bool, error) {
	return findPurgeRun(ctx, db, lastPurge, service, "last purge")
}

// PrunePurgeRuns deletes the finished runs of service beyond its newest
// keep finished ones (PurgeRunsKeepDefault when keep is not positive) and
// returns how many it deleted. Runs still going are never deleted.
func PrunePurgeRuns(ctx context.Context, db dbpool.DB, service string, keep int) (int64, error) {
	if keep <= 0 {
		keep = PurgeRunsKeepDefault
	}
	tag, err := prunePurgeRuns.Run(ctx, db, pruneParams{Service: service, Keep: keep})
	if err != nil {
		return 0, fmt.Errorf("state: prune purge runs of %s: %w", service, err)
	}
	return tag.RowsAffected(), nil
}

// LastFinishedPurge returns the newest finished run of service that was not
// a dry run, failed or not (its Error says), by finish time; false when
// there is none. It is what an operator asks: did the last purge work?
func LastFinishedPurge(ctx context.Context, db dbpool.DB, service string) (PurgeRun, bool, error) {
	return findPurgeRun(ctx, db, lastFinishedPurge, service, "last finished purge")
}

// findPurgeRun runs q, a query for one run of service that may find none
// (LastPurge, LastFinishedPurge); what names the run in errors.
func findPurgeRun(ctx context.Context, db dbpool.DB, q *query.Row[serviceParams, purgeRunRow], service, what string) (PurgeRun, bool, error) {
	r, ok, err := q.Find(ctx, db, serviceParams{Service: service})
	if err != nil {
		return PurgeRun{}, false, fmt.Errorf("state: %s of %s: %w", what, service, err)
	}
	if !ok {
		return PurgeRun{}, false, nil
	}
	return r.run(), true, nil
}
