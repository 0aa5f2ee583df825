package outbox

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestRelayLeaseTakenOver: the active relay's lease is taken by another
// holder (a daemon that found it expired). The relay learns it at its next
// renewal and publishes nothing more: rows written then stay until the
// other holder's lease ends, when this relay takes over again. Without the
// lease checked before each pass (or its work stopped when it is lost),
// those rows would leave while another holds the lease.
func TestRelayLeaseTakenOver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	deliveries := b.consume()
	const ttl = 900 * time.Millisecond
	r := b.relay(func(c *Config) { c.LeaseTTL = ttl; c.Poll = 50 * time.Millisecond })
	waitActive(t, r, true)
	var first uuid.UUID
	require.NoError(t, b.check.QueryRow(ctx, `SELECT platform.publish('test.lease', '{}')`).Scan(&first))
	receiveIDs(t, deliveries, 10*time.Second, first.String())

	_, err := b.check.Exec(ctx, `UPDATE platform.lease SET holder = 'other', expires_at = clock_timestamp() + interval '1 hour' WHERE name = $1`, LeaseName)
	require.NoError(t, err)
	waitActive(t, r, false)
	var held uuid.UUID
	require.NoError(t, b.check.QueryRow(ctx, `SELECT platform.publish('test.lease', '{}')`).Scan(&held))
	quiet(t, deliveries, 3*ttl)
	require.Equal(t, 1, b.pending(), "a relay without the lease published")

	// The other holder's lease ends: this relay takes over and publishes.
	_, err = b.check.Exec(ctx, `UPDATE platform.lease SET expires_at = clock_timestamp() - interval '1 second' WHERE name = $1`, LeaseName)
	require.NoError(t, err)
	receiveIDs(t, deliveries, 10*time.Second, held.String())
	require.True(t, r.Active())
}
