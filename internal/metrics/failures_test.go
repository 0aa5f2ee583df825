package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// SetFailedEvents replaces a service's series: a group gone from the
// counts goes absent, and another service's series stay.
func TestSetFailedEventsReplacesTheServiceSeries(t *testing.T) {
	t.Parallel()
	m := New()
	m.Failures.SetFailedEvents("stock", []FailedCount{
		{Pool: "p", Reason: "permanent", State: "failed", N: 3},
		{Pool: "p", Reason: "decode", State: "discarded", N: 1},
	})
	m.Failures.SetFailedEvents("billing", []FailedCount{{Pool: "q", Reason: "permanent", State: "failed", N: 5}})
	require.Equal(t, 3, testutil.CollectAndCount(m.Failures.FailedEvents, "platformd_failed_events"))
	require.InDelta(t, 3.0, testutil.ToFloat64(m.Failures.FailedEvents.WithLabelValues("stock", "p", "permanent", "failed")), 0)

	m.Failures.SetFailedEvents("stock", []FailedCount{{Pool: "p", Reason: "permanent", State: "resolved", N: 3}})
	require.Equal(t, 2, testutil.CollectAndCount(m.Failures.FailedEvents, "platformd_failed_events"))
	// Gone: the vanished groups (WithLabelValues would make them again,
	// so look through a Gather).
	mfs, err := m.Registry.Gather()
	require.NoError(t, err)
	var series []map[string]string
	for _, mf := range mfs {
		if mf.GetName() != "platformd_failed_events" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range mt.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			series = append(series, l)
		}
	}
	require.ElementsMatch(t, []map[string]string{
		{"service": "billing", "pool": "q", "reason": "permanent", "state": "failed"},
		{"service": "stock", "pool": "p", "reason": "permanent", "state": "resolved"},
	}, series)
}
