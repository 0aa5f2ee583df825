package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/platformd/platformd/internal/query"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/internal/dbutil"
)

// Record is one replay as platform.replay holds it.
type Record struct {
	ID    uuid.UUID
	State string
	// Selection and its options, as asked for.
	Selection            Selection
	TargetPool           string
	IncludeBeyondHorizon bool
	Rate                 int
	// Matched counts the events the selection matched at the start.
	Matched int64
	// Published counts the events published so far.
	Published int64
	// Cursor is the last event id handled, in event_id order (nil before
	// the first chunk).
	Cursor *uuid.UUID
	// Pools are the target pools: the dry run's counts at the start and
	// the copies published to each so far.
	Pools      []PoolCount
	Error      string
	CreatedBy  string
	CreatedAt  time.Time
	FinishedAt time.Time
}

// storedSelection is the selection column: the selection and its options.
type storedSelection struct {
	Selection
	IncludeBeyondHorizon bool `json:"include_beyond_horizon,omitempty"`
}

// Create stores r (state running) in the producer's database, in tx when
// the caller audits in the same transaction.
func Create(ctx context.Context, tx pgx.Tx, r Record) error {
	sel, err := json.Marshal(storedSelection{Selection: r.Selection, IncludeBeyondHorizon: r.IncludeBeyondHorizon})
	if err != nil {
		return fmt.Errorf("replay: encode selection: %w", err)
	}
	pools, err := json.Marshal(r.Pools)
	if err != nil {
		return fmt.Errorf("replay: encode pools: %w", err)
	}
	if _, err := createReplay.Run(ctx, tx, createParams{ID: r.ID, State: StateRunning, Selection: sel, TargetPool: r.TargetPool,
		Rate: r.Rate, Matched: r.Matched, Pools: pools, CreatedBy: r.CreatedBy}); err != nil {
		return fmt.Errorf("replay: store: %w", err)
	}
	return nil
}

// record decodes the row's JSON columns into its Record.
func (row recordRow) record() (Record, error) {
	r := row.Record
	var ss storedSelection
	if err := json.Unmarshal([]byte(row.SelectionJSON), &ss); err != nil {
		return r, fmt.Errorf("replay %s: selection: %w", r.ID, err)
	}
	r.Selection, r.IncludeBeyondHorizon = ss.Selection, ss.IncludeBeyondHorizon
	if err := json.Unmarshal([]byte(row.PoolsJSON), &r.Pools); err != nil {
		return r, fmt.Errorf("replay %s: pools: %w", r.ID, err)
	}
	r.Cursor = row.CursorOrNil
	if row.FinishedOrNil != nil {
		r.FinishedAt = *row.FinishedOrNil
	}
	return r, nil
}

// Get reads one replay; ErrNotFound when there is none of that id.
func Get(ctx context.Context, db query.Querier, id uuid.UUID) (Record, error) {
	row, found, err := getReplay.Find(ctx, db, idParams{ID: id})
	if err != nil {
		return Record{}, fmt.Errorf("replay: get: %w", err)
	}
	if !found {
		return Record{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	r, err := row.record()
	if err != nil {
		return Record{}, fmt.Errorf("replay: read: %w", err)
	}
	return r, nil
}

// List reads the newest replays, at most limit.
func List(ctx context.Context, db query.Querier, limit int) ([]Record, error) {
	var out []Record
	err := listReplays.Each(ctx, db, limitParams{Limit: limit}, func(row recordRow) error {
		r, err := row.record()
		if err != nil {
			return err
		}
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("replay: list: %w", err)
	}
	return out, nil
}

// Cancel marks a running replay cancelled by actor, in tx (the caller
// audits in it), and reports whether it was running; the runner sees it
// before its next chunk.
func Cancel(ctx context.Context, tx pgx.Tx, id uuid.UUID, actor string) (bool, error) {
	tag, err := cancelReplay.Run(ctx, tx, cancelParams{ID: id, Actor: actor})
	if err != nil {
		return false, fmt.Errorf("replay: cancel: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// errNotRunning is recordProgress's error when the replay was cancelled
// (or finished) meanwhile: its progress is still recorded.
var errNotRunning = errors.New("replay no longer running")

// recordProgress stores the cursor and counts after a chunk, whatever the
// state, and reports errNotRunning when the replay is no longer running.
// fence, when set, runs first in the transaction: its error rolls the
// record back and is returned as it is.
func recordProgress(ctx context.Context, db dbutil.TxStarter, r *Record, done bool, fence func(ctx context.Context, tx pgx.Tx) error) error {
	pools, err := json.Marshal(r.Pools)
	if err != nil {
		return fmt.Errorf("replay: encode pools: %w", err)
	}
	var state string
	err = dbutil.WithTx(ctx, db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		if fence != nil {
			if err := fence(ctx, tx); err != nil {
				return err
			}
		}
		var err error
		state, err = recordReplayProgress.One(ctx, tx, progressParams{ID: r.ID, Cursor: r.Cursor, Published: r.Published, Pools: pools, Done: done})
		return err
	})
	if errors.Is(err, errLeaseLost) {
		return err
	}
	if err != nil {
		return fmt.Errorf("replay: record progress: %w", err)
	}
	r.State = state
	if state != StateRunning && state != StateDone {
		return errNotRunning
	}
	return nil
}

// fail marks a running replay failed with why.
func fail(ctx context.Context, db dbutil.TxStarter, id uuid.UUID, why string) error {
	return dbutil.WithTx(ctx, db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		_, err := failReplay.Run(ctx, tx, failParams{ID: id, Why: why})
		return err
	})
}
