package replay

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/dbpool"
)

// benchRows is the archive's size (REPLAY_BENCH_ROWS, default 1M).
func benchRows() int {
	if n, err := strconv.Atoi(os.Getenv("REPLAY_BENCH_ROWS")); err == nil && n > 0 {
		return n
	}
	return 1_000_000
}

// backendCPU returns the CPU time the PostgreSQL backend serving db's one
// connection has used (the server runs on this machine: /proc).
func backendCPU(b *testing.B, db dbpool.DB) time.Duration {
	b.Helper()
	var pid int
	require.NoError(b, db.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&pid))
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0 // another host: not measured
	}
	f := strings.Fields(string(raw)[strings.LastIndexByte(string(raw), ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ = 100
}

// BenchmarkDryRun: a dry run over 1M archived events (one name, the last
// hour) against three consuming services whose processed_event hold 1M
// rows each (half of the archived ids, half others): the selection read
// once, then one set query per service. It reports the seconds per dry
// run and the database CPU it took (producer plus consumers' backends).
func BenchmarkDryRun(b *testing.B) {
	ctx := context.Background()
	n := benchRows()
	one := func(prefix string) *pgxpool.Pool {
		db := database(b, prefix) //nolint:contextcheck // test setup: scratch databases live as long as the benchmark
		db.Close()
		cfg := db.Config()
		cfg.MaxConns = 1
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(b, err)
		b.Cleanup(p.Close)
		return p
	}
	producer := one("replay_bench_prod")
	_, err := producer.Exec(ctx, `INSERT INTO platform.outbox_archive (event_id, event_name, occurred_at, payload, created_at, published_at)
		SELECT platform.uuid_v7(), 'order.order.placed.v1', now() - interval '30 minutes', '{"order_id": "x"}', now(), now()
		FROM generate_series(1, $1)`, n)
	require.NoError(b, err)
	_, err = producer.Exec(ctx, `ANALYZE platform.outbox_archive`)
	require.NoError(b, err)
	var targets []Target
	for i, name := range []string{"stock", "shipping", "billing"} {
		db := one("replay_bench_" + name)
		// Half of the archived ids (every other, by a stride per service),
		// and as many ids of other events.
		rows, err := producer.Query(ctx, `SELECT event_id FROM platform.outbox_archive`)
		require.NoError(b, err)
		var ids [][16]byte
		k := 0
		for rows.Next() {
			var id [16]byte
			require.NoError(b, rows.Scan(&id))
			if (k+i)%2 == 0 {
				ids = append(ids, id)
			}
			k++
		}
		rows.Close()
		_, err = db.Exec(ctx, `INSERT INTO processed_event (event_id, processed_at) SELECT u, now() FROM unnest($1::uuid[]) u`, ids)
		require.NoError(b, err)
		_, err = db.Exec(ctx, `INSERT INTO processed_event (event_id, processed_at) SELECT gen_random_uuid(), now() FROM generate_series(1, $1)`, n-len(ids))
		require.NoError(b, err)
		_, err = db.Exec(ctx, `ANALYZE processed_event`)
		require.NoError(b, err)
		targets = append(targets, Target{Pool: name + "-events", Service: name, Bindings: []string{"order.#"}, DB: db,
			Horizon: 336 * time.Hour, Quarantine: true})
	}
	sel := Selection{EventNames: []string{"order.order.placed.v1"}, From: time.Now().Add(-time.Hour)}
	dbs := []dbpool.DB{producer, targets[0].DB, targets[1].DB, targets[2].DB}
	var cpu time.Duration
	b.ResetTimer()
	for b.Loop() {
		before := time.Duration(0)
		for _, db := range dbs {
			before += backendCPU(b, db)
		}
		t0 := time.Now()
		items, _, err := Select(ctx, producer, sel, 24*time.Hour)
		require.NoError(b, err)
		t1 := time.Now()
		counts, err := DryRun(ctx, items, Targets(items, targets), false, time.Now())
		require.NoError(b, err)
		b.Logf("select %v, counts %v", t1.Sub(t0), time.Since(t1))
		require.Len(b, items, n)
		require.Equal(b, int64(n/2), counts[0].AlreadyProcessed+counts[0].WouldApply-int64(n/2))
		after := time.Duration(0)
		for _, db := range dbs {
			after += backendCPU(b, db)
		}
		cpu += after - before
	}
	b.ReportMetric(cpu.Seconds()/float64(b.N), "db-cpu-s/op")
}
