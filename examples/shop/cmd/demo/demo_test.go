package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/examples/shop"
)

// The end-to-end run needs PostgreSQL and RabbitMQ: `make demo`. These
// tests cover the parts that do not.

func TestParseMetrics(t *testing.T) {
	t.Parallel()
	text := `# HELP platformd_messages_total Messages handled, by outcome.
# TYPE platformd_messages_total counter
platformd_messages_total{outcome="processed",pool="stock-events",service="stock"} 1234
platformd_messages_total{outcome="duplicate",pool="stock-events",service="stock"} 5
platformd_messages_total{outcome="processed",pool="other",service="x"} 99
platformd_duplicates_total{pool="shipping-events",service="shipping",source="replay"} 7 1700000000000
platformd_pool_in_flight{pool="shipping-events",service="shipping"} 3
platformd_failures_total{pool="stock-events",reason="a \"quoted\" one",service="stock"} 1
go_goroutines 12
`
	s := &scraper{pools: map[string]bool{"stock-events": true, "shipping-events": true}}
	c, err := s.collect(strings.NewReader(text))
	require.NoError(t, err)
	require.Equal(t, map[string]float64{"processed": 1234, "duplicate": 5}, c.outcome)
	require.Equal(t, map[string]float64{"replay": 7}, c.source)
	require.InDelta(t, 3, c.inFlight, 0)
	require.InDelta(t, 1239, c.deliveries(), 0)

	name, labels, v, err := parseSample(`platformd_failures_total{pool="p",reason="a \"quoted\" one\\n"} 2`)
	require.NoError(t, err)
	require.Equal(t, "platformd_failures_total", name)
	require.Equal(t, map[string]string{"pool": "p", "reason": `a "quoted" one\n`}, labels)
	require.InDelta(t, 2, v, 0)
}

func TestPlan(t *testing.T) {
	t.Parallel()
	p, err := newPlan(200, 0.05, 42)
	require.NoError(t, err)
	require.Len(t, p.orders, 200)
	require.Len(t, p.stockIDs, 200)
	require.Equal(t, len(p.events), len(p.stockIDs)+len(p.shippingIDs))
	require.Len(t, p.replay, share(len(p.events), 0.05))
	seen := map[string]bool{}
	for _, ev := range p.events {
		var env envelopeJSON
		require.NoError(t, json.Unmarshal(ev.body, &env))
		require.Equal(t, ev.id.String(), env.EventID)
		_, err := time.Parse(time.RFC3339Nano, env.OccurredAt)
		require.NoError(t, err, "occurred_at is RFC 3339")
		require.Equal(t, ev.name, env.EventName)
		require.EqualValues(t, 7, ev.id.Version(), "producer-set UUID v7")
		require.False(t, seen[ev.id.String()], "ids are unique")
		seen[ev.id.String()] = true
		require.JSONEq(t, string(ev.payload), string(env.Payload))
	}
	lines := 0
	for _, o := range p.orders {
		require.NoError(t, shop.OrderPlaced{OrderID: o.id, CustomerID: o.id, Lines: o.lines}.Validate())
		require.Equal(t, statuses[o.version-1], o.status)
		lines += len(o.lines)
	}
	require.Equal(t, p.lines, lines)
}
