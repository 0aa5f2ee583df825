package workers

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/metrics"
)

func TestConflictObserverCountsEveryConflictAndLogsOncePerInterval(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	var logs bytes.Buffer
	o := NewConflictObserver(m, "shipping", "shipping-events", slog.New(slog.NewTextHandler(&logs, nil)))
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	o.now = func() time.Time { return now }

	o.Conflict("40P01")
	require.Equal(t, 1, strings.Count(logs.String(), "\n"), "the first conflict is said at once")
	require.Contains(t, logs.String(), "sqlstate_40P01=1")
	require.Contains(t, logs.String(), "pool=shipping-events")

	now = now.Add(time.Second)
	o.Conflict("40P01")
	o.Conflict("40001")
	o.Replay()
	require.Equal(t, 1, strings.Count(logs.String(), "\n"), "within the interval: counted, not logged")

	now = now.Add(ConflictLogIntervalDefault)
	o.Conflict("40P01")
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 2)
	require.Contains(t, lines[1], "sqlstate_40P01=2")
	require.Contains(t, lines[1], "sqlstate_40001=1")
	require.Contains(t, lines[1], "replays=1")

	conflicts := func(code string) int {
		return int(testutil.ToFloat64(m.TxConflicts.WithLabelValues("shipping", "shipping-events", code)))
	}
	require.Equal(t, 3, conflicts("40P01"), "every conflict is counted")
	require.Equal(t, 1, conflicts("40001"))
	require.InDelta(t, 1, testutil.ToFloat64(m.BatchReplays.WithLabelValues("shipping", "shipping-events")), 0)
}
