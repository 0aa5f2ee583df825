package state

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/platformd/platformd/internal/query"

	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/internal/dbpool"
	"github.com/platformd/platformd/internal/dbutil"
)

// HorizonUpdatedByConfig is Horizon.UpdatedBy when no horizon is stored and
// the configured default is in force.
const HorizonUpdatedByConfig = "config"

// ErrBelowMinHorizon is SetHorizon's refusal of a horizon under the
// service's min_horizon without force.
var ErrBelowMinHorizon = errors.New("horizon below min_horizon")

// ErrInvalidHorizon is SetHorizon's refusal of a horizon that is not
// positive (at microsecond precision).
var ErrInvalidHorizon = errors.New("horizon must be positive")

// Horizon is the replay horizon in force for a service: processed_event
// rows older than Horizon (by the database clock) may be purged.
type Horizon struct {
	// Service is the service's name.
	Service string
	// Horizon is the horizon in force.
	Horizon time.Duration
	// MinHorizon is the floor SetHorizon refuses to go under without force
	// (from the configuration; not stored).
	MinHorizon time.Duration
	// Forced is true when the stored horizon is under the MinHorizon it was
	// set against, which only SetHorizon with force allows.
	Forced bool
	// UpdatedAt is when the horizon was stored; zero when Stored is false.
	UpdatedAt time.Time
	// UpdatedBy is the actor (an admin token's name, never a secret) that
	// stored it, or HorizonUpdatedByConfig when Stored is false.
	UpdatedBy string
	// Stored is false when no horizon is stored and the configured default
	// is in force.
	Stored bool
}

// GetHorizon returns the horizon stored for service, or def (Stored false,
// UpdatedBy HorizonUpdatedByConfig) when none is stored. min is reported as
// MinHorizon. It is safe for concurrent use.
func GetHorizon(ctx context.Context, db query.Querier, service string, def, min time.Duration) (Horizon, error) {
	h := Horizon{Service: service, MinHorizon: min}
	r, ok, err := getHorizon.Find(ctx, db, serviceParams{Service: service})
	if err != nil {
		return Horizon{}, fmt.Errorf("state: get horizon of %s: %w", service, err)
	}
	if !ok {
		h.Horizon, h.UpdatedBy = def, HorizonUpdatedByConfig
		return h, nil
	}
	h.Horizon, h.Forced, h.UpdatedAt, h.UpdatedBy, h.Stored = r.Horizon, r.Forced, r.UpdatedAt, r.UpdatedBy, true
	return h, nil
}

// SetHorizon stores h as service's horizon, truncated to microseconds (the
// precision of a PostgreSQL interval), and returns what was stored. It
// refuses a horizon that is not positive (ErrInvalidHorizon) and, unless
// force is set, one under min (ErrBelowMinHorizon); a horizon under min
// stored with force is marked Forced. In the same transaction it writes a
// platform.horizon_audit row (old horizon, NULL when none was stored; new
// horizon; forced; actor) and a platform.audit_log entry (AuditHorizonSet),
// and NOTIFYs ChannelHorizon with the service name,
// delivered on commit. actor is a name for the audit trail (an admin
// token's name), never a secret. Concurrent calls for one service are
// serialized, so each audit row's old horizon is the one it replaced.
func SetHorizon(ctx context.Context, db dbpool.DB, service string, h, min time.Duration, force bool, actor string) (Horizon, error) {
	return SetHorizonAudited(ctx, db, service, h, min, force, actor, nil)
}

// SetHorizonAudited is SetHorizon with more to say in the audit_log
// entry's detail (e.g. the duplicate age a forced horizon is under);
// detail's keys never replace SetHorizon's own.
func SetHorizonAudited(ctx context.Context, db dbpool.DB, service string, h, min time.Duration, force bool, actor string, detail map[string]any) (Horizon, error) {
	h = h.Truncate(time.Microsecond)
	if h <= 0 {
		return Horizon{}, fmt.Errorf("state: set horizon of %s to %s: %w", service, h, ErrInvalidHorizon)
	}
	below := h < min
	if below && !force {
		return Horizon{}, fmt.Errorf("state: set horizon of %s to %s (min_horizon %s): %w", service, h, min, ErrBelowMinHorizon)
	}
	res := Horizon{Service: service, MinHorizon: min, Stored: true}
	err := dbutil.WithTx(ctx, db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		// Serialize setters of this service: the first horizon of a service
		// has no row to lock yet.
		if _, err := lockHorizon.Run(ctx, tx, serviceParams{Service: service}); err != nil {
			return err
		}
		var old *time.Duration
		stored, found, err := storedHorizon.Find(ctx, tx, serviceParams{Service: service})
		if err != nil {
			return err
		}
		if found {
			old = &stored
		}
		r, err := upsertHorizon.One(ctx, tx, setHorizonParams{Service: service, Horizon: h, Forced: below, Actor: actor})
		if err != nil {
			return err
		}
		res.Horizon, res.Forced, res.UpdatedAt, res.UpdatedBy = r.Horizon, r.Forced, r.UpdatedAt, r.UpdatedBy
		if _, err := insertHorizonAudit.Run(ctx, tx, horizonAuditParams{Service: service, Old: old, New: h, Forced: below, Actor: actor}); err != nil {
			return err
		}
		var from any
		if old != nil {
			from = old.String()
		}
		audit := map[string]any{}
		for k, v := range detail {
			audit[k] = v
		}
		audit["from"], audit["to"], audit["forced"], audit["force"] = from, h.String(), below, force
		if err := AppendAudit(ctx, tx, actor, AuditHorizonSet, service, audit); err != nil {
			return err
		}
		_, err = notify.Run(ctx, tx, notifyParams{Channel: ChannelHorizon, Payload: service})
		return err
	})
	if err != nil {
		return Horizon{}, fmt.Errorf("state: set horizon of %s: %w", service, err)
	}
	return res, nil
}
