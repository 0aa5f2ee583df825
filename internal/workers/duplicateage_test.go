package workers

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/fixture/shop"
)

// A pool writes the duplicates' ages at most once per interval, not per
// duplicate: the first duplicates are written at once, the ones after wait
// for the interval (noted in memory meanwhile), and a stop writes what is
// left. Every duplicate is counted once in platform.duplicate_age.
func TestDuplicateAgesWrittenAtMostOncePerInterval(t *testing.T) {
	t.Parallel()
	bb := newBundle(t)
	bb.cfg.DuplicateAgeFlushInterval = 5 * time.Second
	p := bb.start(shop.HandlerStockReserve)
	flushed := &p.TestSignals().DuplicateAgesFlushed
	flushed.Init(t)
	const n, rounds = 20, 4
	envs := make([]envelope.Envelope, n)
	for i := range envs {
		envs[i], _ = bb.order(1)
		bb.publishEnv(envs[i], nil)
	}
	bb.waitSettled("processed", func() bool { return p.Info().Processed == n })
	stored := func() int {
		return bb.count(`SELECT coalesce(sum(count), 0)::int FROM platform.duplicate_age WHERE pool = $1 AND source = 'republish'`, bb.cfg.Name)
	}
	pending := func() int64 {
		var c int64
		for _, s := range p.DuplicateAges().Pending(time.Now().Add(-48 * time.Hour)) {
			c += s.Count
		}
		return c
	}
	start := time.Now()
	for r := range rounds {
		for _, env := range envs[r*n/rounds : (r+1)*n/rounds] {
			bb.publishEnv(env, nil)
		}
		want := uint64((r + 1) * n / rounds)
		bb.waitSettled("duplicates counted", func() bool { return p.Info().Duplicates == want })
		if r == 0 {
			flushed.WaitOrTimeout() // the first write comes at once
		}
	}
	first := stored()
	require.Positive(t, first)
	require.Less(t, time.Since(start), bb.cfg.DuplicateAgeFlushInterval, "the rounds fit in one interval (a loaded machine?)")
	require.Equal(t, n, first+int(pending()), "the rest noted in memory, not written")
	flushed.RequireEmpty()

	flushed.WaitOrTimeout() // the interval's write
	require.Equal(t, n, stored())
	require.Zero(t, pending())

	for _, env := range envs[:3] {
		bb.publishEnv(env, nil)
	}
	bb.waitSettled("more duplicates", func() bool { return p.Info().Duplicates == n+3 })
	bb.stop()
	require.Equal(t, n+3, stored(), "the stop writes what is left")
}
