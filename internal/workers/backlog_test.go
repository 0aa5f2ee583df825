package workers

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/fixture/shop"
)

// A pool is at full speed only while it consumes with nothing holding it
// back: not while paused, not under a rate limit, not once stopped.
func TestPoolAtFullSpeed(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	p := b.startPool(false, shop.HandlerStockReserve)
	p.testSignals.Connected.WaitUntil("pool connected", func() bool { return p.connected.Load() == int64(b.cfg.Concurrency) })
	require.True(t, p.AtFullSpeed())

	_, err := p.Pause(b.ctx, "hold", "test")
	require.NoError(t, err)
	require.False(t, p.AtFullSpeed(), "paused")
	_, err = p.Resume(b.ctx, "test")
	require.NoError(t, err)
	require.True(t, p.AtFullSpeed())

	p.SetLimits(100, 100)
	require.False(t, p.AtFullSpeed(), "under a rate limit")
	p.SetLimits(0, 0)
	require.True(t, p.AtFullSpeed(), "the limit lifted")

	b.stop()
	require.False(t, p.AtFullSpeed(), "stopped")
}

// A pool is working while it handles deliveries and for a moment after
// its last batch, and not once it has been idle for longer.
func TestPoolWorking(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	p := b.start(shop.HandlerStockReserve, "test.probe")
	require.False(t, p.Working(), "a pool that has handled nothing")
	release := b.holdHandlers()
	env, _ := b.order(1)
	b.publishEnv(env, nil)
	b.waitFor("the event in a handler", func() bool { return b.holding.Load() == 1 })
	require.True(t, p.Working(), "a delivery in hand")
	release()
	b.waitSettled("the event settled", func() bool { return p.Info().Processed == 1 })
	b.waitFor("idle past the window", func() bool { return !p.Working() })
}
