package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const producerService = `
  - name: order
    database: postgres://postgres@127.0.0.1:5432/order
`

func TestOutboxProducerService(t *testing.T) {
	t.Parallel()
	c, err := parseWith(t, baseYAML+producerService+"    outbox: {batch_size: 200, poll: 250ms}\n", nil)
	require.NoError(t, err)
	s, ok := c.Service("order")
	require.True(t, ok)
	require.Empty(t, s.Pools)
	require.Equal(t, OutboxConfig{Relay: true, BatchSize: 200, Poll: 250 * time.Millisecond, Unroutable: OutboxUnroutableHold, Configured: true}, s.Outbox)

	c, err = parseWith(t, baseYAML+producerService+"    outbox: {}\n", nil)
	require.NoError(t, err)
	s, _ = c.Service("order")
	require.Equal(t, OutboxConfig{Relay: true, BatchSize: OutboxBatchSizeDefault, Poll: OutboxPollDefault, Unroutable: OutboxUnroutableDefault, Configured: true}, s.Outbox)

	c, err = parseWith(t, baseYAML+producerService+"    outbox: {unroutable: drop}\n", nil)
	require.NoError(t, err)
	s, _ = c.Service("order")
	require.Equal(t, OutboxUnroutableDrop, s.Outbox.Unroutable)

	c, err = parseWith(t, baseYAML+producerService+"    outbox: {archive: 720h}\n", nil)
	require.NoError(t, err)
	s, _ = c.Service("order")
	require.Equal(t, 720*time.Hour, s.Outbox.Archive)

	// Through a transaction-mode pooler too: replays hold no session.
	c, err = parseWith(t, baseYAML+producerService+"    database_mode: pooler\n    outbox: {archive: 720h}\n", nil)
	require.NoError(t, err)
	s, _ = c.Service("order")
	require.Equal(t, 720*time.Hour, s.Outbox.Archive)
	require.True(t, s.Pooler())

	// Consumer services relay by default too (their handlers may publish).
	stock, _ := c.Service("stock")
	require.True(t, stock.Outbox.Relay)
	require.False(t, stock.Outbox.Configured)
}

func TestOutboxValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml, path, msg string
	}{
		{"NoPoolsNoOutbox", producerService, "services[2].pools", "a producer service with no pools needs an outbox block"},
		{"NoPoolsRelayOff", producerService + "    outbox: {relay: false}\n", "services[2].outbox.relay", "must run its relay"},
		{"BatchSize", producerService + "    outbox: {batch_size: 0}\n", "services[2].outbox.batch_size", "must be between 1 and 10000 (got 0)"},
		{"Poll", producerService + "    outbox: {poll: 1ms}\n", "services[2].outbox.poll", "must be between 10ms and 1h (got 1ms)"},
		{"ArchiveShort", producerService + "    outbox: {archive: 30m}\n", "services[2].outbox.archive", "must be 0 (off) or at least 1h (got 30m)"},
		{"ArchiveNegative", producerService + "    outbox: {archive: -1h}\n", "services[2].outbox.archive", "must be 0 (off) or at least 1h"},
		{"Unroutable", producerService + "    outbox: {unroutable: keep}\n", "services[2].outbox.unroutable", `must be hold or drop (got "keep")`},
		{"UnroutableEmpty", producerService + "    outbox: {unroutable: \"\"}\n", "services[2].outbox.unroutable", `must be hold or drop (got "")`},
		{"UnknownKey", producerService + "    outbox: {relays: true}\n", "services[2].outbox.relays", "unknown key"},
		{"RelayNotBool", producerService + "    outbox: {relay: yes please}\n", "services[2].outbox.relay", "must be a boolean"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseWith(t, baseYAML+tc.yaml, nil)
			ps := requireProblems(t, err)
			require.Len(t, ps, 1, "%v", ps)
			require.Equal(t, tc.path, ps[0].Path)
			require.Contains(t, ps[0].Message, tc.msg)
		})
	}
}
