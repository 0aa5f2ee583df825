package state

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/platformd/platformd/internal/dbutil"
)

// Notification channels (LISTEN/NOTIFY) on which state changes are
// announced; the payload is the pool or service name.
const (
	ChannelPool    = "platformd_pool"
	ChannelHorizon = "platformd_horizon"
)

// PoolState is a pool's stored pause state.
type PoolState struct {
	Pool      string
	Paused    bool
	Reason    string
	UpdatedAt time.Time
	UpdatedBy string
}

// GetPoolState returns the stored state of pool; a pool never paused is
// running (Paused false, zero UpdatedAt).
func GetPoolState(ctx context.Context, db RowQuerier, pool string) (PoolState, error) {
	st := PoolState{Pool: pool}
	err := db.QueryRow(ctx, `SELECT paused, reason, updated_at, updated_by FROM platform.pool_state WHERE pool = $1`, pool).
		Scan(&st.Paused, &st.Reason, &st.UpdatedAt, &st.UpdatedBy)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("state: get pool %s: %w", pool, err)
	}
	return st, nil
}

// SetPoolPaused stores pool's pause state and announces it on
// ChannelPool, in one transaction (NOTIFY is delivered on commit).
// Setting the state it already has only refreshes reason, time and actor.
// Every call is recorded in platform.audit_log (AuditPoolPause or
// AuditPoolResume) in the same transaction.
func SetPoolPaused(ctx context.Context, db *pgxpool.Pool, pool string, paused bool, reason, actor string) (PoolState, error) {
	st := PoolState{Pool: pool}
	err := dbutil.WithTx(ctx, db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO platform.pool_state (pool, paused, reason, updated_at, updated_by)
			VALUES ($1, $2, $3, now(), $4)
			ON CONFLICT (pool) DO UPDATE SET paused = EXCLUDED.paused, reason = EXCLUDED.reason,
				updated_at = EXCLUDED.updated_at, updated_by = EXCLUDED.updated_by
			RETURNING paused, reason, updated_at, updated_by`, pool, paused, reason, actor).
			Scan(&st.Paused, &st.Reason, &st.UpdatedAt, &st.UpdatedBy); err != nil {
			return err
		}
		action, detail := AuditPoolResume, map[string]any{}
		if paused {
			action, detail = AuditPoolPause, map[string]any{"reason": reason}
		}
		if err := AppendAudit(ctx, tx, actor, action, pool, detail); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelPool, pool)
		return err
	})
	if err != nil {
		return st, fmt.Errorf("state: set pool %s paused=%v: %w", pool, paused, err)
	}
	return st, nil
}
