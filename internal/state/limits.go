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

// ChannelLimits is the notification channel on which a pool's stored limits
// are announced as changed; the payload is the pool's name.
const ChannelLimits = "platformd_limits"

// Audited actions of live limits (platform.audit_log.action, migration 015).
const (
	// AuditServicePause is a service's kill switch set (PauseAll); Target
	// is the service, Detail "reason".
	AuditServicePause = "service.pause"
	// AuditServiceResume is a service's kill switch lifted (ResumeAll);
	// Target is the service.
	AuditServiceResume = "service.resume"
	// AuditPoolLimits is a pool's limits set; Target is the pool, Detail
	// "rate", "burst", "concurrency" (as stored) and "reason".
	AuditPoolLimits = "pool.limits"
)

// MemberTTL is how recent a daemon's heartbeat on a pool must be for it to
// count as running the pool when the pool's rate is shared out.
const MemberTTL = 3 * time.Second

// ServicePause is a service's stored kill switch.
type ServicePause struct {
	Service   string
	Paused    bool
	Reason    string
	UpdatedAt time.Time
	UpdatedBy string
}

func (r *ServicePause) dest() []any {
	return []any{&r.Paused, &r.Reason, &r.UpdatedAt, &r.UpdatedBy}
}

type setServicePauseParams struct {
	Service       string
	Paused        bool
	Reason, Actor string
}

// GetServicePause returns service's stored kill switch; one never set is
// not paused (zero UpdatedAt).
func GetServicePause(ctx context.Context, db query.Querier, service string) (ServicePause, error) {
	r, _, err := getServicePause.Find(ctx, db, serviceParams{Service: service})
	r.Service = service
	if err != nil {
		return r, fmt.Errorf("state: get kill switch of %s: %w", service, err)
	}
	return r, nil
}

// SetServicePaused stores service's kill switch, records it in the audit
// log (AuditServicePause or AuditServiceResume) and announces it on
// ChannelPool with an empty payload (every pool re-reads its state), in one
// transaction.
func SetServicePaused(ctx context.Context, db dbpool.DB, service string, paused bool, reason, actor string) (ServicePause, error) {
	st, err := dbutil.WithTxV(ctx, db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) (ServicePause, error) {
		r, err := upsertServicePause.One(ctx, tx, setServicePauseParams{Service: service, Paused: paused, Reason: reason, Actor: actor})
		if err != nil {
			return r, err
		}
		action, detail := AuditServiceResume, map[string]any{}
		if paused {
			action, detail = AuditServicePause, map[string]any{"reason": reason}
		}
		if err := AppendAudit(ctx, tx, actor, action, service, detail); err != nil {
			return r, err
		}
		_, err = notify.Run(ctx, tx, notifyParams{Channel: ChannelPool, Payload: ""})
		return r, err
	})
	st.Service = service
	if err != nil {
		return st, fmt.Errorf("state: set kill switch of %s paused=%v: %w", service, paused, err)
	}
	return st, nil
}

// KillSwitchReasonPrefix starts the paused reason a pool reports while its
// service's kill switch holds.
const KillSwitchReasonPrefix = "pause-all: "

// GetEffectivePoolState returns pool's pause state in force: paused when
// the pool is, or when its service's kill switch holds (the reason is then
// the kill switch's, after KillSwitchReasonPrefix).
func GetEffectivePoolState(ctx context.Context, db query.Querier, service, pool string) (PoolState, error) {
	st, err := GetPoolState(ctx, db, pool)
	if err != nil {
		return st, err
	}
	sp, err := GetServicePause(ctx, db, service)
	if err != nil {
		return st, err
	}
	if sp.Paused {
		st.Paused, st.Reason, st.UpdatedAt, st.UpdatedBy = true, KillSwitchReasonPrefix+sp.Reason, sp.UpdatedAt, sp.UpdatedBy
	}
	return st, nil
}

// PoolLimits are a pool's limits as stored by SetPoolLimits.
type PoolLimits struct {
	Pool string
	// Rate is in events per second for the pool across every daemon; 0:
	// no limit.
	Rate float64
	// Burst is the bucket's size; 0: the rate.
	Burst int
	// Concurrency is the pool's workers; 0: the config's.
	Concurrency int
	Reason      string
	UpdatedAt   time.Time
	UpdatedBy   string
}

func (r *PoolLimits) dest() []any {
	return []any{&r.Rate, &r.Burst, &r.Concurrency, &r.Reason, &r.UpdatedAt, &r.UpdatedBy}
}

// GetPoolLimits returns pool's stored limits, and false when none were
// ever stored (the config's apply).
func GetPoolLimits(ctx context.Context, db query.Querier, pool string) (PoolLimits, bool, error) {
	r, ok, err := getPoolLimits.Find(ctx, db, poolParams{Pool: pool})
	r.Pool = pool
	if err != nil {
		return r, false, fmt.Errorf("state: get limits of pool %s: %w", pool, err)
	}
	return r, ok, nil
}

// SetPoolLimits stores l (l.UpdatedBy is the actor; a Concurrency of 0
// keeps the stored one), records it in the audit log (AuditPoolLimits) and
// announces it on ChannelLimits, in one transaction, and returns what is
// stored.
func SetPoolLimits(ctx context.Context, db dbpool.DB, l PoolLimits) (PoolLimits, error) {
	st, err := dbutil.WithTxV(ctx, db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) (PoolLimits, error) {
		r, err := upsertPoolLimits.One(ctx, tx, l)
		if err != nil {
			return r, err
		}
		detail := map[string]any{"rate": r.Rate, "burst": r.Burst, "concurrency": r.Concurrency, "reason": r.Reason}
		if err := AppendAudit(ctx, tx, l.UpdatedBy, AuditPoolLimits, l.Pool, detail); err != nil {
			return r, err
		}
		_, err = notify.Run(ctx, tx, notifyParams{Channel: ChannelLimits, Payload: l.Pool})
		return r, err
	})
	st.Pool = l.Pool
	if err != nil {
		return st, fmt.Errorf("state: set limits of pool %s: %w", l.Pool, err)
	}
	return st, nil
}

type memberParams struct {
	Pool, Member string
}

// HeartbeatPoolMember records that member (a daemon) runs pool now and
// returns how many daemons run it (at least 1).
func HeartbeatPoolMember(ctx context.Context, db query.Querier, pool, member string) (int, error) {
	n, err := heartbeatMember.One(ctx, db, memberParams{Pool: pool, Member: member})
	if err != nil {
		return 1, fmt.Errorf("state: heartbeat of pool %s: %w", pool, err)
	}
	return max(n, 1), nil
}

// LeavePool deletes member's row of pool (and rows stale for an hour), so
// that the others take its share at once.
func LeavePool(ctx context.Context, db query.Querier, pool, member string) error {
	if _, err := deleteMember.Run(ctx, db, memberParams{Pool: pool, Member: member}); err != nil {
		return fmt.Errorf("state: leave pool %s: %w", pool, err)
	}
	return nil
}
