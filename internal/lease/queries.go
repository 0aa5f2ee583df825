package lease

import (
	"github.com/platformd/platformd/internal/query"
)

// This file holds every statement the lease runs on platform.lease, each
// named (package query): "lease.renew" is what pg_stat_activity and the
// errors show. The database's clock (clock_timestamp()) alone decides
// expiry.

// leaseParams name the lease and its holder; TTL is the lease's life in
// milliseconds (acquire and renew only).
type leaseParams struct {
	Name, Holder string
	TTLMillis    int64
}

func leaseArgs(p leaseParams) []any { return []any{p.Name, p.Holder, p.TTLMillis} }

func holderArgs(p leaseParams) []any { return []any{p.Name, p.Holder} }

func nameArgs(p leaseParams) []any { return []any{p.Name} }

// holdingRow is a row of currentLease.
type holdingRow struct {
	holder   string
	leftMsec int64
}

func (r *holdingRow) dest() []any { return []any{&r.holder, &r.leftMsec} }

// acquireLease takes the lease when it is free, expired or already ours; it
// returns a row only when this holder has it.
var acquireLease = query.NewRow("lease.acquire", `INSERT INTO platform.lease AS l (name, holder, expires_at, acquired_at, renewed_at)
VALUES ($1, $2, clock_timestamp() + $3 * interval '1 millisecond', clock_timestamp(), clock_timestamp())
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at,
	acquired_at = CASE WHEN l.holder = excluded.holder THEN l.acquired_at ELSE excluded.acquired_at END,
	renewed_at = excluded.renewed_at
WHERE l.holder = excluded.holder OR l.expires_at < clock_timestamp()
RETURNING holder`, leaseArgs, query.Column[string])

// renewLease extends the lease only while this holder has it and it has not
// expired: an expired lease is never revived by its old holder's renewal.
var renewLease = query.NewExec("lease.renew", `UPDATE platform.lease SET expires_at = clock_timestamp() + $3 * interval '1 millisecond',
	renewed_at = clock_timestamp()
WHERE name = $1 AND holder = $2 AND expires_at > clock_timestamp()`, leaseArgs)

// fenceLease returns a row only while this holder holds the lease by the
// database's clock, and locks it FOR SHARE: a take-over (acquireLease's upsert)
// waits for the caller's transaction to end.
var fenceLease = query.NewRow("lease.fence", `SELECT true FROM platform.lease
WHERE name = $1 AND holder = $2 AND expires_at > clock_timestamp() FOR SHARE`, holderArgs, query.Column[bool])

// currentLease returns the lease's holder and the milliseconds its row has
// left, while it has not expired.
var currentLease = query.NewRow("lease.current", `SELECT holder,
	ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint
FROM platform.lease WHERE name = $1 AND expires_at > clock_timestamp()`, nameArgs, (*holdingRow).dest)

// releaseLease gives the lease up, only if this holder has it.
var releaseLease = query.NewExec("lease.release", `DELETE FROM platform.lease WHERE name = $1 AND holder = $2`, holderArgs)
