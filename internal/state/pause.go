package state

import (
	"context"
	"fmt"
	"time"

	"github.com/platformd/platformd/internal/query"

	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/internal/dbpool"
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
func GetPoolState(ctx context.Context, db query.Querier, pool string) (PoolState, error) {
	r, _, err := getPoolState.Find(ctx, db, poolParams{Pool: pool})
	if err != nil {
		return PoolState{Pool: pool}, fmt.Errorf("state: get pool %s: %w", pool, err)
	}
	return PoolState{Pool: pool, Paused: r.Paused, Reason: r.Reason, UpdatedAt: r.UpdatedAt, UpdatedBy: r.UpdatedBy}, nil
}

// SetPoolPaused stores pool's pause state and announces it on
// ChannelPool, in one transaction (NOTIFY is delivered on commit).
// Setting the state it already has only refreshes reason, time and actor.
// Every call is recorded in platform.audit_log (AuditPoolPause or
// AuditPoolResume) in the same transaction.
func SetPoolPaused(ctx context.Context, db dbpool.DB, pool string, paused bool, reason, actor string) (PoolState, error) {
	st := PoolState{Pool: pool}
	err := dbutil.WithTx(ctx, db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		r, err := upsertPoolState.One(ctx, tx, setPoolParams{Pool: pool, Paused: paused, Reason: reason, Actor: actor})
		if err != nil {
			return err
		}
		st.Paused, st.Reason, st.UpdatedAt, st.UpdatedBy = r.Paused, r.Reason, r.UpdatedAt, r.UpdatedBy
		action, detail := AuditPoolResume, map[string]any{}
		if paused {
			action, detail = AuditPoolPause, map[string]any{"reason": reason}
		}
		if err := AppendAudit(ctx, tx, actor, action, pool, detail); err != nil {
			return err
		}
		_, err = notify.Run(ctx, tx, notifyParams{Channel: ChannelPool, Payload: pool})
		return err
	})
	if err != nil {
		return st, fmt.Errorf("state: set pool %s paused=%v: %w", pool, paused, err)
	}
	return st, nil
}
