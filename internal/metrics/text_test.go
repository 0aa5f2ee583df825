package metrics

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseTextUnescapesLabels(t *testing.T) {
	t.Parallel()
	var labels map[string]string
	err := ParseText(strings.NewReader(`platformd_x{a="b\\c\"d",e="f"} 1`+"\n"), func(_ string, l map[string]string, _ float64) {
		labels = l
	})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"a": `b\c"d`, "e": "f"}, labels)
}

// What Handler serves reads back: counters by their name, a histogram as
// _count, _sum and _bucket samples.
func TestScrapeReadsWhatHandlerServes(t *testing.T) {
	t.Parallel()
	m := New()
	m.MessagesTotal.WithLabelValues("stock", "p", OutcomeProcessed).Add(7)
	m.BatchSize.WithLabelValues("stock", "p").Observe(3)
	m.BatchSize.WithLabelValues("stock", "p").Observe(40)
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()

	got := map[string]float64{}
	err := Scrape(t.Context(), srv.Client(), srv.URL, func(name string, l map[string]string, v float64) {
		switch name {
		case "platformd_messages_total":
			got[name+"/"+l["outcome"]] += v
		case "platformd_batch_size_count", "platformd_batch_size_sum":
			got[name] += v
		case "platformd_batch_size_bucket":
			got[name+"/"+l["le"]] += v
		}
	})
	require.NoError(t, err)
	require.InDelta(t, 7, got["platformd_messages_total/processed"], 0)
	require.InDelta(t, 2, got["platformd_batch_size_count"], 0)
	require.InDelta(t, 43, got["platformd_batch_size_sum"], 0)
	require.InDelta(t, 1, got["platformd_batch_size_bucket/5"], 0)
	require.InDelta(t, 2, got["platformd_batch_size_bucket/+Inf"], 0)
}
