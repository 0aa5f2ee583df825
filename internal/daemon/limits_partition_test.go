package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/workers"
)

// A partitioned pool takes a new concurrency from SetPoolLimits under
// load, 4 -> 1 -> 3, on its running consumer: every key's events apply
// in their order, each once, nothing is redelivered and the reader keeps
// its consumer tag.
func TestSetPoolLimitsResizesAPartitionedPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newLimitsEnv(t, "limits_partition")
	const event, keys, seqs = "seq.applied.v1", 50, 60
	dir := filepath.Dir(e.path)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "seqmig"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "seqmig", "001_applied.sql"), []byte(`-- +goose Up
CREATE TABLE applied (n bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, k text NOT NULL, seq integer NOT NULL, event_id uuid NOT NULL);
`), 0o600))
	cfgText := fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
metrics: {listen: "-"}
broker: {url: %q, exchange: reload.%s}
services:
  - name: stock
    database: %q
    migrations: seqmig
    sql_handlers:
      - name: seq.apply
        events: [%s]
        sql:
          - INSERT INTO applied (k, seq, event_id) VALUES (@payload->>'k', (@payload->>'seq')::integer, @event_id)
    pools:
      - name: seq-events
        queue: reload.seq.%s
        queue_type: classic
        bindings: [%s]
        handlers: [seq.apply]
        partition_key: /k
        concurrency: 4
        prefetch: 200
        batch: {size: 20}
        limits: {rate: 400, burst: 40}
`, e.broker, e.suffix, e.dsn, event, e.suffix, event)
	require.NoError(t, os.WriteFile(e.path, []byte(cfgText), 0o600))
	cfg, full, _ := loadShop(t, e.path)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	require.NoError(t, Migrate(ctx, cfg, full, false, logger))
	sigs := &TestSignals{PoolBuiltFunc: func(p *workers.Pool) {
		p.TestSignals().ConsumerStarted.Init(t)
		p.TestSignals().Resized.Init(t)
	}}
	d, err := start(ctx, cfg, full, Options{testSignals: sigs}, map[string]bool{"stock": true}, logger)
	require.NoError(t, err)
	t.Cleanup(d.Stop)
	p := daemonPool(t, d, "seq-events")
	p.TestSignals().ConsumerStarted.WaitOrTimeout()

	// Seq-major: every key's events are spread over the whole stream.
	confirms := make([]*amqp.DeferredConfirmation, 0, keys*seqs)
	for seq := 1; seq <= seqs; seq++ {
		for k := range keys {
			body, err := envelope.Encode(envelope.Envelope{EventID: uuid.Must(uuid.NewV7()), EventName: event, OccurredAt: time.Now().UTC(),
				Payload: json.RawMessage(fmt.Sprintf(`{"k": "key-%02d", "seq": %d}`, k, seq))})
			require.NoError(t, err)
			c, err := e.ch.PublishWithDeferredConfirmWithContext(ctx, "reload."+e.suffix, event, false, false,
				amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
			require.NoError(t, err)
			confirms = append(confirms, c)
		}
	}
	for _, c := range confirms {
		ok, err := c.WaitContext(ctx)
		require.NoError(t, err)
		require.True(t, ok)
	}
	applied := func() int { return count(t, e.db, `SELECT count(*) FROM applied`) }
	b := &backend{d: d}
	for _, step := range []struct{ after, conc int }{{600, 1}, {1500, 3}} {
		require.Eventually(t, func() bool { return applied() >= step.after }, time.Minute, 10*time.Millisecond)
		_, err := b.SetPoolLimits(ctx, admin.PoolLimitsRequest{Pool: "seq-events", Rate: 400, Burst: 40, Concurrency: step.conc, Reason: "resize"}, "ops")
		require.NoError(t, err)
		require.Equal(t, step.conc, p.TestSignals().Resized.WaitOrTimeout())
		n := applied()
		t.Logf("concurrency %d from %d events applied", step.conc, n)
		require.Less(t, n, keys*seqs, "changed mid-stream")
	}
	require.Eventually(t, func() bool { return applied() >= keys*seqs }, 2*time.Minute, 20*time.Millisecond)
	require.Eventually(t, func() bool { return p.Info().InFlight == 0 }, 10*time.Second, 10*time.Millisecond)

	require.Equal(t, keys*seqs, applied(), "each event applied once")
	require.Equal(t, keys*seqs, count(t, e.db, `SELECT count(DISTINCT (k, seq)) FROM applied`))
	require.Zero(t, count(t, e.db, `SELECT count(*) FROM (
		SELECT seq, row_number() OVER (PARTITION BY k ORDER BY n) AS rn FROM applied) x WHERE seq <> rn`),
		"every key's events applied in their order")
	info := p.Info()
	require.Zero(t, info.Duplicates, "no redelivery")
	require.EqualValues(t, keys*seqs, info.Processed)
	require.Equal(t, 3, info.Concurrency)
	require.Equal(t, workers.StateRunning, info.State)
	p.TestSignals().ConsumerStarted.RequireEmpty() // the reader kept its consumer tag
}
