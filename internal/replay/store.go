package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

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
	if _, err := tx.Exec(ctx, `INSERT INTO platform.replay (id, state, selection, target_pool, rate, matched, pools, created_by)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		r.ID, StateRunning, sel, r.TargetPool, r.Rate, r.Matched, pools, r.CreatedBy); err != nil {
		return fmt.Errorf("replay: store: %w", err)
	}
	return nil
}

const recordColumns = `id, state, selection::text, target_pool, rate, matched, published, cursor, pools::text, error, created_by, created_at, finished_at`

func scanRecord(row pgx.Row) (Record, error) {
	var r Record
	var sel, pools string
	var cursor *uuid.UUID
	var finished *time.Time
	if err := row.Scan(&r.ID, &r.State, &sel, &r.TargetPool, &r.Rate, &r.Matched, &r.Published, &cursor, &pools,
		&r.Error, &r.CreatedBy, &r.CreatedAt, &finished); err != nil {
		return r, err
	}
	var ss storedSelection
	if err := json.Unmarshal([]byte(sel), &ss); err != nil {
		return r, fmt.Errorf("replay %s: selection: %w", r.ID, err)
	}
	r.Selection, r.IncludeBeyondHorizon = ss.Selection, ss.IncludeBeyondHorizon
	if err := json.Unmarshal([]byte(pools), &r.Pools); err != nil {
		return r, fmt.Errorf("replay %s: pools: %w", r.ID, err)
	}
	r.Cursor = cursor
	if finished != nil {
		r.FinishedAt = *finished
	}
	return r, nil
}

// Get reads one replay; ErrNotFound when there is none of that id.
func Get(ctx context.Context, db Querier, id uuid.UUID) (Record, error) {
	rows, err := db.Query(ctx, `SELECT `+recordColumns+` FROM platform.replay WHERE id = $1`, id)
	if err != nil {
		return Record{}, fmt.Errorf("replay: get: %w", err)
	}
	list, err := collect(rows)
	if err != nil {
		return Record{}, err
	}
	if len(list) == 0 {
		return Record{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return list[0], nil
}

// List reads the newest replays, at most limit.
func List(ctx context.Context, db Querier, limit int) ([]Record, error) {
	rows, err := db.Query(ctx, `SELECT `+recordColumns+` FROM platform.replay ORDER BY created_at DESC, id DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("replay: list: %w", err)
	}
	return collect(rows)
}

func collect(rows pgx.Rows) ([]Record, error) {
	defer rows.Close()
	var out []Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("replay: read: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("replay: read: %w", err)
	}
	return out, nil
}

// Cancel marks a running replay cancelled by actor, in tx (the caller
// audits in it), and reports whether it was running; the runner sees it
// before its next chunk.
func Cancel(ctx context.Context, tx pgx.Tx, id uuid.UUID, actor string) (bool, error) {
	tag, err := tx.Exec(ctx, `UPDATE platform.replay SET state = $2, cancelled_by = $3, finished_at = now(), updated_at = now()
		WHERE id = $1 AND state = $4`, id, StateCancelled, actor, StateRunning)
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
		return tx.QueryRow(ctx, `UPDATE platform.replay SET cursor = $2, published = $3, pools = $4, updated_at = now(),
			state = CASE WHEN state = 'running' AND $5 THEN 'done' ELSE state END,
			finished_at = CASE WHEN state = 'running' AND $5 THEN now() ELSE finished_at END
			WHERE id = $1 RETURNING state`, r.ID, r.Cursor, r.Published, pools, done).Scan(&state)
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
		_, err := tx.Exec(ctx, `UPDATE platform.replay SET state = 'failed', error = $2, finished_at = now(), updated_at = now()
			WHERE id = $1 AND state = 'running'`, id, why)
		return err
	})
}
