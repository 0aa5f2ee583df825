package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestProcessedEventDefaults(t *testing.T) {
	t.Parallel()
	c, err := parseWith(t, baseYAML, nil)
	require.NoError(t, err)
	s, _ := c.Service("stock")
	require.Equal(t, ProcessedEventConfig{}, s.ProcessedEvent)
	require.False(t, s.ProcessedEvent.Partitioned())

	c, err = parseWith(t, baseYAML+producerService+"    outbox: {}\n    processed_event: {partitions: daily}\n", nil)
	require.NoError(t, err)
	s, _ = c.Service("order")
	require.Equal(t, ProcessedEventConfig{Partitions: PartitionsDaily, Ahead: PartitionsAheadDefault}, s.ProcessedEvent)
	require.True(t, s.ProcessedEvent.Partitioned())

	c, err = parseWith(t, baseYAML+producerService+"    outbox: {}\n    processed_event: {partitions: daily, ahead: 10}\n", nil)
	require.NoError(t, err)
	s, _ = c.Service("order")
	require.Equal(t, 10, s.ProcessedEvent.Ahead)
}

func TestProcessedEventValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml, path, msg string
	}{
		{"Partitions", "    processed_event: {partitions: hourly}\n", "services[2].processed_event.partitions", `must be one of , daily (got "hourly")`},
		{"AheadWithoutPartitions", "    processed_event: {ahead: 3}\n", "services[2].processed_event.ahead", "only with partitions"},
		{"AheadRange", "    processed_event: {partitions: daily, ahead: 0}\n", "services[2].processed_event.ahead", "between 1 and 60 days (got 0)"},
		{"UnknownKey", "    processed_event: {partition: daily}\n", "services[2].processed_event.partition", "unknown key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseWith(t, baseYAML+producerService+"    outbox: {}\n"+tc.yaml, nil)
			ps := requireProblems(t, err)
			require.Len(t, ps, 1, "%v", ps)
			require.Equal(t, tc.path, ps[0].Path)
			require.Contains(t, ps[0].Message, tc.msg)
		})
	}
}
