package startstop_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/startstop"
)

// within reports whether got is want plus the jitter Jitter may add.
func within(got, want time.Duration) bool { return got >= want && got <= want+want/5 }

func TestBackoffDoublesUpToMaxAndResets(t *testing.T) {
	var b startstop.Backoff // the defaults: 100 ms doubling to 5 s
	want := []time.Duration{100, 200, 400, 800, 1600, 3200, 5000, 5000}
	for i, w := range want {
		w *= time.Millisecond
		got := b.Next()
		require.Truef(t, within(got, w), "wait %d: %v, want %v plus at most 20%%", i, got, w)
	}
	b.Reset()
	got := b.Next()
	require.Truef(t, within(got, startstop.BackoffMinDefault), "after Reset: %v", got)
}

func TestBackoffBounds(t *testing.T) {
	b := startstop.Backoff{Min: 500 * time.Millisecond, Max: 800 * time.Millisecond}
	for i, w := range []time.Duration{500, 800, 800} {
		w *= time.Millisecond
		got := b.Next()
		require.Truef(t, within(got, w), "wait %d: %v, want %v plus at most 20%%", i, got, w)
	}
	// A Min over Max waits Max.
	b = startstop.Backoff{Min: time.Second, Max: 300 * time.Millisecond}
	require.True(t, within(b.Next(), 300*time.Millisecond))
}

func TestJitterSpreads(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 50 {
		d := startstop.Jitter(time.Second)
		require.True(t, within(d, time.Second), "%v", d)
		seen[d] = true
	}
	require.Greater(t, len(seen), 1, "50 jittered waits all equal: no jitter")
}
