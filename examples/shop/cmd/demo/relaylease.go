package main

// This file explains a wait the newcomer would otherwise take for a hang:
// after a SIGKILL, the outbox relays wait for the killed run's leases
// (platform.lease) to expire before they publish again.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// relayLeaseName is the platform.lease row of a service's outbox relay.
const relayLeaseName = "platformd.outbox"

// relayLeaseWait explains outbox rows that do not move after a SIGKILL:
// each outbox's relay runs only on the daemon holding its lease, a row of
// platform.lease that its holder renews. A SIGKILLed daemon cannot release
// it, and the restarted one cannot tell a dead holder from a slow one, so
// it takes the lease only once the row expires, a TTL (15 s by default)
// after the dead run's last renewal. That wait is by design; this says so,
// with the seconds left. It returns "" when no outbox's lease is held by a
// run other than the current one.
func (dm *demo) relayLeaseWait(ctx context.Context) (string, error) {
	var waits []string
	ttl := 0.0
	for _, o := range []struct {
		service string
		db      *pgxpool.Pool
	}{{"order", dm.orderDB}, {"stock", dm.stock.db}, {"shipping", dm.shipping.db}} {
		var holder string
		var left, life float64
		err := o.db.QueryRow(ctx, `SELECT holder, extract(epoch FROM expires_at - clock_timestamp())::float8,
			extract(epoch FROM expires_at - renewed_at)::float8
			FROM platform.lease WHERE name = $1 AND expires_at > clock_timestamp()`, relayLeaseName).Scan(&holder, &left, &life)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("read %s's relay lease: %w", o.service, err)
		}
		if holderPID(holder) == dm.d.pid() {
			continue
		}
		waits = append(waits, fmt.Sprintf("%s's %.0f s", o.service, math.Ceil(left)))
		ttl = max(ttl, life)
	}
	if len(waits) == 0 {
		return "", nil
	}
	return fmt.Sprintf("waiting, by design, for the SIGKILLed run's outbox relay leases to expire (%s left): "+
		"a dead holder looks like a slow one until its %.0f s TTL runs out (SIGTERM hands them over at once)",
		strings.Join(waits, ", "), ttl), nil
}

// holderPID returns the process id in a lease holder's name
// ("<host>:<pid>:<random>"), or -1.
func holderPID(holder string) int {
	parts := strings.Split(holder, ":")
	if len(parts) < 3 {
		return -1
	}
	pid, err := strconv.Atoi(parts[len(parts)-2])
	if err != nil {
		return -1
	}
	return pid
}
