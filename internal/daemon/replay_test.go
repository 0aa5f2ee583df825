package daemon

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/outbox"
	"github.com/platformd/platformd/internal/procstat"
	"github.com/platformd/platformd/internal/replay"
	"github.com/platformd/platformd/internal/testdb"
)

// replayEnv is a daemon hosting a producer (order, archived) and two stock
// services (stock and stock2) both bound to order.order.placed.v1.
type replayEnv struct {
	d                  *Daemon
	stock2Queue        string
	b                  *backend
	env                *reloadEnv // its signals
	order, stock, stk2 *pgxpool.Pool
}

func newReplayEnv(t testing.TB) *replayEnv {
	t.Helper()
	stockDSN := testdb.New(t, "replay_stock")
	stock2DSN := testdb.New(t, "replay_stock2")
	orderDSN := testdb.New(t, "replay_order")
	e := newReloadEnv(t, stockDSN)
	e.write(t, "", fmt.Sprintf("  - name: order\n    database: %q\n    outbox: {archive: 24h, poll: 50ms}\n", orderDSN)+
		serviceYAML("stock2", stock2DSN, e.poolYAML("stock2-events", "stock2", shop.EventOrderPlaced, shop.HandlerStockReserve, "")))
	d := e.start(t)
	t.Cleanup(d.Stop)
	env := &replayEnv{d: d, b: &backend{d: d}, env: e, stock2Queue: "reload.stock2." + e.suffix}
	for _, p := range []struct {
		dsn string
		db  **pgxpool.Pool
	}{{orderDSN, &env.order}, {stockDSN, &env.stock}, {stock2DSN, &env.stk2}} {
		db, err := pgxpool.New(context.Background(), p.dsn)
		require.NoError(t, err)
		t.Cleanup(db.Close)
		*p.db = db
	}
	e.sigs.ServiceUp.WaitUntil("every service up", func() bool {
		for _, s := range d.serviceList() {
			if !s.up.Load() {
				return false
			}
		}
		return true
	})
	return env
}

func count(t testing.TB, db *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func (e *replayEnv) pool(ctx context.Context, t testing.TB, name string) admin.PoolInfo {
	t.Helper()
	pools, err := e.b.ListPools(ctx, "")
	require.NoError(t, err)
	for _, p := range pools {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no pool %s", name)
	return admin.PoolInfo{}
}

// Restore after an incident: the reservations of five orders are lost in
// stock (rows and processed_event rows); the dry run says so per pool; a
// replay targeted at stock's pool applies them once there and leaves
// stock2 untouched; a replay of two events through the exchange changes
// nothing anywhere and is counted as duplicates from source replay.
func TestReplayRestoreAfterIncident(t *testing.T) {
	t.Parallel()
	e := newReplayEnv(t)
	ctx := context.Background()
	start := time.Now().Add(-time.Minute)
	const n = 20
	var ids []uuid.UUID
	for range n {
		var id uuid.UUID
		require.NoError(t, e.order.QueryRow(ctx, `SELECT platform.publish('order.order.placed.v1', jsonb_build_object(
			'order_id', gen_random_uuid(), 'customer_id', gen_random_uuid(),
			'lines', jsonb_build_array(jsonb_build_object('product_id', gen_random_uuid(), 'quantity', '1.000'))))`).Scan(&id))
		ids = append(ids, id)
	}
	require.Eventually(t, func() bool {
		return count(t, e.stock, `SELECT count(*) FROM reservation`) == n && count(t, e.stk2, `SELECT count(*) FROM reservation`) == n &&
			count(t, e.order, `SELECT count(*) FROM platform.outbox_archive`) == n
	}, 30*time.Second, 20*time.Millisecond, "every order reserved twice and archived")

	// The incident: five orders' reservations lost in stock, with their
	// processed_event rows (a restore from an older backup, say).
	lost := ids[:5]
	orderIDs := make([]uuid.UUID, 0, len(lost))
	for _, id := range lost {
		var oid uuid.UUID
		require.NoError(t, e.order.QueryRow(ctx, `SELECT (payload->>'order_id')::uuid FROM platform.outbox_archive WHERE event_id = $1`, id).Scan(&oid))
		orderIDs = append(orderIDs, oid)
	}
	_, err := e.stock.Exec(ctx, `DELETE FROM reservation WHERE order_id = ANY($1)`, orderIDs)
	require.NoError(t, err)
	_, err = e.stock.Exec(ctx, `DELETE FROM processed_event WHERE event_id = ANY($1)`, lost)
	require.NoError(t, err)

	sel := admin.ReplayRequest{Service: "order", EventNames: []string{"order.#"}, From: start, To: time.Now().Add(time.Minute), Rate: 500}
	dry := sel
	dry.DryRun = true
	info, err := e.b.ReplayEvents(ctx, dry, "ops")
	require.NoError(t, err)
	require.Equal(t, replay.StateDryRun, info.State)
	require.Equal(t, int64(n), info.Matched)
	require.Equal(t, []admin.ReplayPoolInfo{
		{Pool: "stock-events", Service: "stock", WouldApply: 5, AlreadyProcessed: 15},
		{Pool: "stock2-events", Service: "stock2", AlreadyProcessed: 20},
	}, info.Pools)

	// Replayed to stock's pool only.
	target := sel
	target.TargetPool = "stock-events"
	before2 := e.pool(ctx, t, "stock2-events")
	info, err = e.b.ReplayEvents(ctx, target, "ops")
	require.NoError(t, err)
	require.Equal(t, replay.StateRunning, info.State)
	id := uuid.MustParse(info.ID)
	require.Eventually(t, func() bool {
		got, err := e.b.GetReplay(ctx, "order", id)
		require.NoError(t, err)
		return got.State == replay.StateDone
	}, 30*time.Second, 20*time.Millisecond, "replay done")
	require.Eventually(t, func() bool {
		return count(t, e.stock, `SELECT count(*) FROM reservation`) == n
	}, 30*time.Second, 20*time.Millisecond, "the lost reservations restored")
	e.env.settled(t, "stock-events").WaitUntil("the others skipped as replay duplicates", func() bool {
		return e.pool(ctx, t, "stock-events").DuplicatesBySource.Replay == n-5
	})
	require.Equal(t, n, count(t, e.stock, `SELECT count(DISTINCT order_id) FROM reservation`), "applied once")
	after2 := e.pool(ctx, t, "stock2-events")
	require.Equal(t, before2.Processed, after2.Processed)
	require.Equal(t, before2.Duplicates, after2.Duplicates, "stock2 untouched")
	got, err := e.b.GetReplay(ctx, "order", id)
	require.NoError(t, err)
	require.Equal(t, int64(n), got.Published)
	require.Equal(t, []admin.ReplayPoolInfo{{Pool: "stock-events", Service: "stock", WouldApply: 5, AlreadyProcessed: 15, PublishedCopies: n}}, got.Pools)

	// Through the exchange: every service had applied them: duplicates.
	ex := admin.ReplayRequest{Service: "order", EventIDs: ids[10:12], Rate: 500}
	info, err = e.b.ReplayEvents(ctx, ex, "ops")
	require.NoError(t, err)
	e.env.settled(t, "stock2-events").WaitUntil("stock2 counts the copies as replay duplicates", func() bool {
		return e.pool(ctx, t, "stock2-events").DuplicatesBySource.Replay == 2
	})
	require.Equal(t, before2.Processed, e.pool(ctx, t, "stock2-events").Processed)
	require.Equal(t, n, count(t, e.stk2, `SELECT count(*) FROM reservation`))

	list, err := e.b.ListReplays(ctx, "order", 10)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, info.ID, list[0].ID)
	audit, err := e.b.ListAudit(ctx, "order", 10)
	require.NoError(t, err)
	require.Len(t, audit.Entries, 2)
	require.Equal(t, "replay.start", audit.Entries[0].Action)
	require.Equal(t, "ops", audit.Entries[0].Actor)
}

// Bad requests: each refused with the right sentinel, naming the field.
func TestReplayBadInput(t *testing.T) {
	t.Parallel()
	e := newReplayEnv(t)
	ctx := context.Background()
	now := time.Now()
	var id uuid.UUID
	require.NoError(t, e.order.QueryRow(ctx, `SELECT platform.publish('order.order.placed.v1', '{}')`).Scan(&id))
	require.Eventually(t, func() bool {
		return count(t, e.order, `SELECT count(*) FROM platform.outbox_archive`) == 1
	}, 30*time.Second, 20*time.Millisecond, "archived")
	base := admin.ReplayRequest{Service: "order", From: now.Add(-time.Hour), Rate: 500}
	for _, tc := range []struct {
		name string
		mod  func(r *admin.ReplayRequest)
		err  error
		msg  string
	}{
		{"UnknownService", func(r *admin.ReplayRequest) { r.Service = "nope" }, admin.ErrNotFound, `service "nope"`},
		{"NoArchive", func(r *admin.ReplayRequest) { r.Service = "stock" }, admin.ErrFailedPrecondition, "outbox.archive"},
		{"UnknownPool", func(r *admin.ReplayRequest) { r.TargetPool = "nope" }, admin.ErrNotFound, "target_pool"},
		{"UnknownPattern", func(r *admin.ReplayRequest) { r.EventNames = []string{"order.*.cancelled.v1"} }, admin.ErrNotFound, "event_names[0]"},
		{"BadPattern", func(r *admin.ReplayRequest) { r.EventNames = []string{"order..x"} }, admin.ErrInvalidArgument, "event_names[0]"},
		{"EmptySelection", func(r *admin.ReplayRequest) { r.From = time.Time{} }, admin.ErrInvalidArgument, "from/to or event_ids"},
		{"NothingMatched", func(r *admin.ReplayRequest) { r.From = now.Add(time.Hour) }, admin.ErrFailedPrecondition, "matched no archived event"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := base
			tc.mod(&r)
			_, err := e.b.ReplayEvents(ctx, r, "ops")
			require.ErrorIs(t, err, tc.err)
			require.ErrorContains(t, err, tc.msg)
		})
	}
	_, err := e.b.GetReplay(ctx, "order", uuid.New())
	require.ErrorIs(t, err, admin.ErrNotFound)
	_, err = e.b.CancelReplay(ctx, "order", uuid.New(), "ops")
	require.ErrorIs(t, err, admin.ErrNotFound)
}

// BenchmarkLivePoolUnderReplay measures what a replay at its default rate
// (500/s, targeted to stock's pool) costs a live pool of another service:
// the time stock2's pool takes to drain a backlog of 20000 events, without
// then with the replay running, the order alternating from one round to the
// next so that the machine's drift falls on both sides. It reports the
// throughput kept, in % (the median of the rounds' ratios, and their
// extremes), and what the replay itself costs the machine while no live
// load runs (replay-cpu-%: busy CPU of the whole machine, in % of its
// cores, with the replay running less without): on a machine that the live
// pool saturates, the replay can take at most that share from it, which
// msgs/s on a shared 2-core machine can't resolve to 5%.
func BenchmarkLivePoolUnderReplay(b *testing.B) {
	e := newReplayEnv(b)
	ctx := context.Background()
	// 50k archived events: the replay outlasts the measurement.
	_, err := outbox.EnsureArchivePartitions(ctx, e.order, outbox.ArchiveAheadDefault)
	require.NoError(b, err)
	_, err = e.order.Exec(ctx, `INSERT INTO platform.outbox_archive (event_id, event_name, occurred_at, payload, created_at, published_at)
		SELECT platform.uuid_v7(), 'order.order.placed.v1', now() - interval '1 minute', jsonb_build_object(
			'order_id', gen_random_uuid(), 'customer_id', gen_random_uuid(),
			'lines', jsonb_build_array(jsonb_build_object('product_id', gen_random_uuid(), 'quantity', '1.000'))), now(), now()
		FROM generate_series(1, 50000)`)
	require.NoError(b, err)
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	require.NoError(b, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(b, err)
	const k = 20000
	drain := func() time.Duration {
		_, err := e.b.PausePool(ctx, "stock2-events", "bench", "bench")
		require.NoError(b, err)
		before := e.pool(ctx, b, "stock2-events").Processed
		for range k {
			body, err := envelope.Encode(envelope.Envelope{EventID: uuid.Must(uuid.NewV7()), EventName: shop.EventOrderPlaced,
				OccurredAt: time.Now(), Payload: []byte(fmt.Sprintf(`{"order_id": %q, "customer_id": %q, "lines": [{"product_id": %q, "quantity": "1.000"}]}`,
					uuid.New(), uuid.New(), uuid.New()))})
			require.NoError(b, err)
			require.NoError(b, ch.PublishWithContext(ctx, "", e.stock2Queue, false, false, amqp.Publishing{ContentType: "application/json", Body: body}))
		}
		start := time.Now()
		_, err = e.b.ResumePool(ctx, "stock2-events", "bench")
		require.NoError(b, err)
		require.Eventually(b, func() bool { return e.pool(ctx, b, "stock2-events").Processed >= before+k }, 2*time.Minute, 5*time.Millisecond)
		return time.Since(start)
	}
	startReplay := func() uuid.UUID {
		info, err := e.b.ReplayEvents(ctx, admin.ReplayRequest{Service: "order", From: time.Now().Add(-time.Hour), Rate: 500,
			TargetPool: "stock-events"}, "bench")
		require.NoError(b, err)
		id := uuid.MustParse(info.ID)
		first := int64(-1)
		require.Eventually(b, func() bool { // running, and past its first chunks
			r, err := e.b.GetReplay(ctx, "order", id)
			if err != nil || r.Published == 0 {
				return false
			}
			if first < 0 {
				first = r.Published
			}
			return r.Published > first+500
		}, time.Minute, 10*time.Millisecond, "the replay running")
		return id
	}
	stopReplay := func(id uuid.UUID) {
		_, err := e.b.CancelReplay(ctx, "order", id, "bench")
		require.NoError(b, err)
	}
	// busy is the CPU, in cores, of each party over a window of 3 s.
	busy := func() procstat.Sample {
		s0, t0 := procstat.Read(os.Getpid()), time.Now()
		time.Sleep(3 * time.Second) //nolint:forbidigo // a sampling window: the measurement's length, not a wait
		d, sec := procstat.Read(os.Getpid()).Sub(s0), time.Since(t0).Seconds()
		return procstat.Sample{Consumer: d.Consumer / sec, Broker: d.Broker / sec, DB: d.DB / sec, Machine: d.Machine / sec}
	}
	var alone, under time.Duration
	var kept []float64
	round := 0
	for b.Loop() {
		var a, u time.Duration
		if round%2 == 0 {
			a = drain()
			id := startReplay()
			u = drain()
			stopReplay(id)
		} else {
			id := startReplay()
			u = drain()
			stopReplay(id)
			a = drain()
		}
		round++
		alone, under = alone+a, under+u
		kept = append(kept, 100*a.Seconds()/u.Seconds())
	}
	b.StopTimer()
	idle := busy()
	id := startReplay()
	with := busy()
	stopReplay(id)
	slices.Sort(kept)
	b.ReportMetric(kept[len(kept)/2], "kept-%")
	b.ReportMetric(kept[0], "kept-min-%")
	b.ReportMetric(kept[len(kept)-1], "kept-max-%")
	cost := with.Sub(idle)
	cores := float64(runtime.NumCPU())
	b.ReportMetric(100*cost.Machine/cores, "replay-cpu-%")
	b.ReportMetric(100*cost.Consumer/cores, "replay-daemon-cpu-%")
	b.ReportMetric(100*cost.Broker/cores, "replay-broker-cpu-%")
	b.ReportMetric(100*cost.DB/cores, "replay-db-cpu-%")
	b.ReportMetric(float64(k)*float64(b.N)/alone.Seconds(), "alone-msg/s")
	b.ReportMetric(float64(k)*float64(b.N)/under.Seconds(), "under-replay-msg/s")
}
