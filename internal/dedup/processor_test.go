package dedup_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/migrate"
	"github.com/platformd/platformd/internal/testdb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"))
}

// testBundle is one scratch stock database with the shop's migrations.
type testBundle struct {
	db  *pgxpool.Pool
	reg *consumer.Registry
	dsn string
	// failOn makes the "test.flaky" handler fail for these ids.
	failOn sync.Map
	// sqlFailOn makes the handler run a failing SQL statement for these ids.
	sqlFailOn sync.Map
	calls     atomic.Int64
}

func setup(t testing.TB) *testBundle {
	t.Helper()
	ctx := context.Background()
	b := &testBundle{reg: consumer.NewRegistry()}
	require.NoError(t, shop.Register(b.reg))
	b.reg.MustRegister(consumer.Registration{
		Name:   "test.flaky",
		Events: []string{shop.EventOrderPlaced},
		Handler: consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
			b.calls.Add(1)
			if v, ok := b.failOn.Load(ev.ID); ok {
				return v.(error)
			}
			if _, ok := b.sqlFailOn.Load(ev.ID); ok {
				// A real SQL error aborts the transaction (25P02 would
				// follow for any further statement).
				_, err := tx.Exec(ctx, `SELECT 1/0`)
				return err
			}
			return nil
		}),
	})
	b.dsn = testdb.New(t, t.Name())
	sets, err := migrate.Sets(b.reg, []string{shop.HandlerStockReserve})
	require.NoError(t, err)
	require.NoError(t, migrate.Apply(ctx, b.dsn, sets, slog.New(slog.NewTextHandler(io.Discard, nil))))
	b.db, err = dedup.Connect(ctx, b.dsn, dedup.ConnectConfig{MaxConns: 8})
	require.NoError(t, err)
	t.Cleanup(b.db.Close)
	return b
}

func (b *testBundle) processor(t testing.TB, handlers ...string) *dedup.Processor {
	t.Helper()
	routes, err := dedup.RoutesFor(b.reg, handlers)
	require.NoError(t, err)
	return dedup.NewProcessor(b.db, dedup.ProcessorConfig{Routes: routes})
}

func orderEvent(t testing.TB, lines int) consumer.Event {
	t.Helper()
	return newOrderEvent(lines)
}

// newOrderEvent is an order of lines lines of quantity 2 (safe to call
// from any goroutine).
func newOrderEvent(lines int) consumer.Event {
	o := shop.OrderPlaced{OrderID: uuid.New(), CustomerID: uuid.New()}
	for range lines {
		o.Lines = append(o.Lines, shop.OrderLine{ProductID: uuid.New(), Quantity: "2.000"})
	}
	payload, _ := json.Marshal(o) // a struct of uuids and strings cannot fail to marshal
	return consumer.Event{ID: uuid.Must(uuid.NewV7()), Name: shop.EventOrderPlaced, OccurredAt: time.Now(), Payload: payload}
}

func (b *testBundle) count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

func (b *testBundle) reservations(t testing.TB, ev consumer.Event) int {
	var o shop.OrderPlaced
	require.NoError(t, json.Unmarshal(ev.Payload, &o))
	return b.count(t, `SELECT count(*) FROM reservation WHERE order_id = $1`, o.OrderID)
}

func (b *testBundle) processedRows(t testing.TB, id uuid.UUID) int {
	return b.count(t, `SELECT count(*) FROM processed_event WHERE event_id = $1`, id)
}

func outcomes(rs []dedup.Result) []dedup.Outcome {
	out := make([]dedup.Outcome, len(rs))
	for i, r := range rs {
		out[i] = r.Outcome
	}
	return out
}

// The seed's step 7: the same event processed twice gives one reservation
// per line and one processed_event row.
func TestProcessSameEventTwice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.processor(t, shop.HandlerStockReserve)
	ctx := context.Background()
	ev := orderEvent(t, 3)

	rs, err := p.Process(ctx, []consumer.Event{ev})
	require.NoError(t, err)
	require.Equal(t, dedup.OutcomeProcessed, rs[0].Outcome)
	rs, err = p.Process(ctx, []consumer.Event{ev})
	require.NoError(t, err)
	require.Equal(t, dedup.OutcomeDuplicate, rs[0].Outcome)

	require.Equal(t, 3, b.reservations(t, ev))
	require.Equal(t, 1, b.processedRows(t, ev.ID))
}

// The seed's second test: a failing handler leaves no processed_event row
// and no effect; processed again later, the effects happen once.
func TestProcessHandlerFailureLeavesNoRow(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"go-error", "sql-error", "panic"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			// stock.reserve runs first, so its effect must be rolled back too.
			p := b.processor(t, shop.HandlerStockReserve, "test.flaky")
			ctx := context.Background()
			ev := orderEvent(t, 2)
			switch mode {
			case "go-error":
				b.failOn.Store(ev.ID, errors.New("boom"))
			case "sql-error":
				b.sqlFailOn.Store(ev.ID, true)
			case "panic":
				b.reg.MustRegister(consumer.Registration{Name: "test.panic", Events: []string{shop.EventOrderPlaced},
					Handler: consumer.HandlerFunc(func(context.Context, pgx.Tx, consumer.Event) error { panic("kaboom") })})
				p = b.processor(t, shop.HandlerStockReserve, "test.panic")
			}

			rs, err := p.Process(ctx, []consumer.Event{ev})
			require.NoError(t, err)
			require.Equal(t, dedup.OutcomeFailed, rs[0].Outcome)
			require.Error(t, rs[0].Err)
			require.False(t, rs[0].Permanent)
			require.Equal(t, 0, b.processedRows(t, ev.ID))
			require.Equal(t, 0, b.reservations(t, ev))
			if mode == "panic" {
				var pe *dedup.PanicError
				require.ErrorAs(t, rs[0].Err, &pe)
				return
			}
			_, err = dedup.Lookup(ctx, b.db, ev.ID)
			require.ErrorIs(t, err, dedup.ErrNotFound)

			b.failOn.Delete(ev.ID)
			b.sqlFailOn.Delete(ev.ID)
			rs, err = p.Process(ctx, []consumer.Event{ev})
			require.NoError(t, err)
			require.Equal(t, dedup.OutcomeProcessed, rs[0].Outcome)
			require.Equal(t, 2, b.reservations(t, ev))
			require.Equal(t, 1, b.processedRows(t, ev.ID))
			at, err := dedup.Lookup(ctx, b.db, ev.ID)
			require.NoError(t, err)
			require.WithinDuration(t, time.Now(), at, time.Minute)
		})
	}
}

func TestProcessPermanentError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.processor(t, shop.HandlerStockReserve)
	ev := orderEvent(t, 1)
	ev.Payload = json.RawMessage(`{"order_id": "not-a-uuid", "customer_id": null, "lines": []}`)
	rs, err := p.Process(context.Background(), []consumer.Event{ev})
	require.NoError(t, err)
	require.Equal(t, dedup.OutcomeFailed, rs[0].Outcome)
	require.True(t, rs[0].Permanent)
	require.Equal(t, shop.HandlerStockReserve, rs[0].Handler)
	require.Equal(t, 0, b.processedRows(t, ev.ID))
}

// A batch of 100 where event 50 fails: 99 committed, event 50 failed with
// no row; and the same with the failure being an SQL error that aborts the
// transaction, and with several failures.
func TestProcessBatchIsolatesFailure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		failAt []int
		sql    bool
	}{
		{"go-error-at-50", []int{50}, false},
		{"sql-error-at-50", []int{50}, true},
		{"first-and-last", []int{0, 99}, true},
		{"several", []int{3, 50, 51, 98}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			p := b.processor(t, shop.HandlerStockReserve, "test.flaky")
			evs := make([]consumer.Event, 100)
			for i := range evs {
				evs[i] = orderEvent(t, 1)
			}
			failing := map[int]bool{}
			for _, i := range tc.failAt {
				failing[i] = true
				if tc.sql {
					b.sqlFailOn.Store(evs[i].ID, true)
				} else {
					b.failOn.Store(evs[i].ID, fmt.Errorf("event %d fails", i))
				}
			}
			rs, err := p.Process(context.Background(), evs)
			require.NoError(t, err)
			for i, r := range rs {
				if failing[i] {
					require.Equal(t, dedup.OutcomeFailed, r.Outcome, "event %d", i)
					require.Equal(t, "test.flaky", r.Handler)
					require.Equal(t, 0, b.processedRows(t, evs[i].ID))
					require.Equal(t, 0, b.reservations(t, evs[i]))
					if tc.sql {
						var pgErr *pgconn.PgError
						require.ErrorAs(t, r.Err, &pgErr)
						require.Equal(t, "22012", pgErr.Code) // division_by_zero, never 25P02
					}
					continue
				}
				require.Equal(t, dedup.OutcomeProcessed, r.Outcome, "event %d: %v", i, r.Err)
				require.Equal(t, 1, b.reservations(t, evs[i]))
			}
			require.Equal(t, 100-len(tc.failAt), b.count(t, `SELECT count(*) FROM processed_event`))
		})
	}
}

// The same id twice in one batch; an id processed in an earlier batch; a
// batch of only duplicates.
func TestProcessDuplicatesInAndAcrossBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.processor(t, shop.HandlerStockReserve)
	ctx := context.Background()
	a, c, d := orderEvent(t, 1), orderEvent(t, 2), orderEvent(t, 1)

	rs, err := p.Process(ctx, []consumer.Event{a, c, a})
	require.NoError(t, err)
	require.Equal(t, []dedup.Outcome{dedup.OutcomeProcessed, dedup.OutcomeProcessed, dedup.OutcomeDuplicate}, outcomes(rs))

	rs, err = p.Process(ctx, []consumer.Event{c, d})
	require.NoError(t, err)
	require.Equal(t, []dedup.Outcome{dedup.OutcomeDuplicate, dedup.OutcomeProcessed}, outcomes(rs))

	rs, err = p.Process(ctx, []consumer.Event{a, d, c, d})
	require.NoError(t, err)
	require.Equal(t, []dedup.Outcome{dedup.OutcomeDuplicate, dedup.OutcomeDuplicate, dedup.OutcomeDuplicate, dedup.OutcomeDuplicate}, outcomes(rs))

	require.Equal(t, 1, b.reservations(t, a))
	require.Equal(t, 2, b.reservations(t, c))
	require.Equal(t, 1, b.reservations(t, d))
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM processed_event`))
}

// A duplicate inside the isolated replay (a batch with a failure) is still
// recognised.
func TestProcessIsolatedReplaySeesDuplicates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.processor(t, shop.HandlerStockReserve, "test.flaky")
	ctx := context.Background()
	old, bad, fresh := orderEvent(t, 1), orderEvent(t, 1), orderEvent(t, 1)
	_, err := p.Process(ctx, []consumer.Event{old})
	require.NoError(t, err)
	b.failOn.Store(bad.ID, errors.New("nope"))
	rs, err := p.Process(ctx, []consumer.Event{old, bad, fresh, fresh})
	require.NoError(t, err)
	require.Equal(t, []dedup.Outcome{dedup.OutcomeDuplicate, dedup.OutcomeFailed, dedup.OutcomeProcessed, dedup.OutcomeDuplicate}, outcomes(rs))
	require.Equal(t, 1, b.reservations(t, old))
	require.Equal(t, 1, b.reservations(t, fresh))
	require.Equal(t, 0, b.reservations(t, bad))
}

// Two concurrent transactions with the same id: the second waits for the
// first instead of erroring; exactly one effect whichever order they end in.
// registerGate registers handler "test.gate": its first call blocks,
// inside its transaction, until release is called, then succeeds or fails
// as firstCommits says; later calls succeed. entered is closed once the
// first call blocks. The test's end releases it in any case.
func (b *testBundle) registerGate(t *testing.T, firstCommits bool) (entered <-chan struct{}, release func()) {
	in, out := make(chan struct{}), make(chan struct{})
	var first, released sync.Once
	release = func() { released.Do(func() { close(out) }) }
	t.Cleanup(release) // a failed assertion must not leave a call blocked
	b.reg.MustRegister(consumer.Registration{Name: "test.gate", Events: []string{shop.EventOrderPlaced},
		Handler: consumer.HandlerFunc(func(context.Context, pgx.Tx, consumer.Event) error {
			isFirst := false
			first.Do(func() { isFirst = true })
			if !isFirst {
				return nil
			}
			close(in)
			<-out
			if !firstCommits {
				return errors.New("first attempt fails")
			}
			return nil
		})})
	return in, release
}

// processed is what one Process call returned.
type processed struct {
	rs  []dedup.Result
	err error
}

// settleRace checks that the second call still waits, releases the gated
// first call and checks both outcomes: the first call's event processed
// (failed when it does not commit), its copy at index copyAt of the second
// call a duplicate (processed). It returns the second call's outcome.
func settleRace(t *testing.T, release func(), firstDone, secondDone <-chan processed, firstCommits bool, copyAt int) processed {
	t.Helper()
	select {
	case <-secondDone:
		t.Fatal("the copy did not wait for the original's outcome")
	default:
	}
	release()
	r1, r2 := <-firstDone, <-secondDone
	require.NoError(t, r1.err)
	require.NoError(t, r2.err)
	if firstCommits {
		require.Equal(t, dedup.OutcomeProcessed, r1.rs[0].Outcome)
		require.Equal(t, dedup.OutcomeDuplicate, r2.rs[copyAt].Outcome)
	} else {
		require.Equal(t, dedup.OutcomeFailed, r1.rs[0].Outcome)
		require.Equal(t, dedup.OutcomeProcessed, r2.rs[copyAt].Outcome, "%v", r2.rs[copyAt].Err)
	}
	return r2
}

// goProcess runs p.Process(ctx, events) in a goroutine; its outcome
// arrives on the returned channel.
func goProcess(ctx context.Context, p *dedup.Processor, events []consumer.Event) <-chan processed {
	done := make(chan processed, 1)
	go func() {
		rs, err := p.Process(ctx, events)
		done <- processed{rs, err}
	}()
	return done
}

func TestProcessConcurrentSameID(t *testing.T) {
	t.Parallel()
	for _, firstCommits := range []bool{true, false} {
		t.Run(fmt.Sprintf("first_commits=%v", firstCommits), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			ev := orderEvent(t, 1)
			// The first call's handler blocks inside its transaction,
			// holding the processed_event row, until released.
			entered, release := b.registerGate(t, firstCommits)
			// Two processors: two daemons sharing the database, which only
			// the row lock coordinates.
			p1 := b.processor(t, shop.HandlerStockReserve, "test.gate")
			p2 := b.processor(t, shop.HandlerStockReserve, "test.gate")

			firstDone := goProcess(ctx, p1, []consumer.Event{ev})
			<-entered
			secondDone := goProcess(ctx, p2, []consumer.Event{ev})
			// The second is blocked on the first's row lock: prove it by
			// waiting for it to show up as waiting on a lock.
			require.Eventually(t, func() bool {
				return b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) == 1
			}, 10*time.Second, 10*time.Millisecond)
			settleRace(t, release, firstDone, secondDone, firstCommits, 0)
			require.Equal(t, 1, b.reservations(t, ev))
			require.Equal(t, 1, b.processedRows(t, ev.ID))
		})
	}
}

// Two daemons whose batches hold the same ids in opposite orders, as relay
// republishes make them, must not deadlock (40P01): the ids are inserted in
// one global order, so the second batch waits on the first's rows and then
// sees them as duplicates. Each round starts both batches together;
// inserted in batch order, they meet in the middle and deadlock. (Two
// processors: the workers of one pool share one, and meet before the
// database.)
func TestProcessOppositeOrdersDoNotDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	procs := []*dedup.Processor{b.processor(t, shop.HandlerStockReserve), b.processor(t, shop.HandlerStockReserve)}
	ctx := context.Background()
	const n = 2000
	for round := 1; round <= 3; round++ {
		evs := make([]consumer.Event, n)
		for i := range evs {
			evs[i] = orderEvent(t, 1)
		}
		reversed := slices.Clone(evs)
		slices.Reverse(reversed)
		batches := [][]consumer.Event{evs, reversed}
		results := make([][]dedup.Result, len(batches))
		errs := make([]error, len(batches))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for k := range batches {
			wg.Go(func() {
				<-start
				results[k], errs[k] = procs[k].Process(ctx, batches[k])
			})
		}
		close(start)
		wg.Wait()
		require.NoError(t, errors.Join(errs...), "round %d", round)
		processed := 0
		for _, rs := range results {
			for _, r := range rs {
				require.NotEqual(t, dedup.OutcomeFailed, r.Outcome, "round %d: %v", round, r.Err)
				if r.Outcome == dedup.OutcomeProcessed {
					processed++
				}
			}
		}
		require.Equal(t, n, processed, "round %d: each id processed once", round)
		require.Equal(t, n*round, b.count(t, `SELECT count(*) FROM reservation`))
	}
}

// Workers of one pool share a Processor. A copy of an event that another
// worker holds in its open transaction is left out of its own batch's
// transaction: the rest of that batch commits at once instead of waiting
// on the row lock, then the copy takes the original's outcome (committed:
// a duplicate; rolled back: processed by this call).
func TestProcessCopyOfAnEventInFlightWaitsOutsideTheTransaction(t *testing.T) {
	t.Parallel()
	for _, firstCommits := range []bool{true, false} {
		t.Run(fmt.Sprintf("first_commits=%v", firstCommits), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			shared, other := orderEvent(t, 1), orderEvent(t, 1)
			entered, release := b.registerGate(t, firstCommits)
			p := b.processor(t, shop.HandlerStockReserve, "test.gate")

			firstDone := goProcess(ctx, p, []consumer.Event{shared})
			<-entered
			secondDone := goProcess(ctx, p, []consumer.Event{other, shared})
			// The second batch's own event commits while the first batch
			// still holds the shared one.
			require.Eventually(t, func() bool { return b.reservations(t, other) == 1 }, 10*time.Second, 5*time.Millisecond)
			require.Zero(t, b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`))
			r2 := settleRace(t, release, firstDone, secondDone, firstCommits, 1)
			require.Equal(t, dedup.OutcomeProcessed, r2.rs[0].Outcome)
			require.Equal(t, 1, b.reservations(t, shared))
			require.Equal(t, 1, b.processedRows(t, shared.ID))
			require.Equal(t, 1, b.processedRows(t, other.ID))
		})
	}
}

// A call waiting for another's outcome gives up when its context ends: a
// batch error, so that nothing of the batch is acked.
func TestProcessWaitingCopyHonoursContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	shared := orderEvent(t, 1)
	entered, release := b.registerGate(t, true)
	p := b.processor(t, shop.HandlerStockReserve, "test.gate")
	firstDone := make(chan error, 1)
	go func() {
		_, err := p.Process(context.Background(), []consumer.Event{shared})
		firstDone <- err
	}()
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := p.Process(ctx, []consumer.Event{shared})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	release()
	require.NoError(t, <-firstDone)
	require.Equal(t, 1, b.reservations(t, shared))
}

// A cancelled context or a dead connection is a batch-level error (nothing
// may be acked), never an event outcome.
func TestProcessInfrastructureErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ev := orderEvent(t, 1)
	b.reg.MustRegister(consumer.Registration{Name: "test.killer", Events: []string{shop.EventOrderPlaced},
		Handler: consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
			// Terminate our own backend, as an operator or a failover would.
			_, err := tx.Exec(ctx, `SELECT pg_terminate_backend(pg_backend_pid())`)
			return err
		})})
	p := b.processor(t, shop.HandlerStockReserve, "test.killer")
	_, err := p.Process(ctx, []consumer.Event{ev})
	require.Error(t, err)
	require.Equal(t, 0, b.processedRows(t, ev.ID))

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = b.processor(t, shop.HandlerStockReserve).Process(cctx, []consumer.Event{ev})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 0, b.processedRows(t, ev.ID))
}

// A handler failing on a deadline of its own (an HTTP call timing out)
// fails its event, which is retried through the delay queues and ends in
// the failure queue: it is not a batch error, which would requeue the
// batch for ever without counting an attempt, its neighbours with it.
func TestProcessHandlersOwnDeadlineFailsItsEvent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bad, good := orderEvent(t, 1), orderEvent(t, 1)
	b.reg.MustRegister(consumer.Registration{Name: "test.slow_call", Events: []string{shop.EventOrderPlaced},
		Handler: consumer.HandlerFunc(func(ctx context.Context, _ pgx.Tx, ev consumer.Event) error {
			if ev.ID != bad.ID {
				return nil
			}
			cctx, cancel := context.WithTimeout(ctx, time.Millisecond)
			defer cancel()
			<-cctx.Done()
			return fmt.Errorf("call the payment service: %w", cctx.Err())
		})})
	p := b.processor(t, shop.HandlerStockReserve, "test.slow_call")
	res, err := p.Process(context.Background(), []consumer.Event{bad, good})
	require.NoError(t, err)
	require.Equal(t, dedup.OutcomeFailed, res[0].Outcome)
	require.ErrorIs(t, res[0].Err, context.DeadlineExceeded)
	require.Equal(t, dedup.OutcomeProcessed, res[1].Outcome)
	require.Equal(t, 0, b.processedRows(t, bad.ID))
	require.Equal(t, 1, b.processedRows(t, good.ID))
}

// A commit refused by a deferred constraint (the handlers' statements all
// passed) is replayed with constraints immediate: the violation fails the
// event that made it and the others commit, where the batch once failed at
// every commit, requeued for ever with no attempt counted.
func TestProcessDeferredConstraintFailsItsEvent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.db.Exec(ctx, `CREATE TABLE deferred_key (k int, CONSTRAINT deferred_key_u UNIQUE (k) DEFERRABLE INITIALLY DEFERRED);
		INSERT INTO deferred_key VALUES (1)`)
	require.NoError(t, err)
	bad, good := orderEvent(t, 1), orderEvent(t, 1)
	b.reg.MustRegister(consumer.Registration{Name: "test.deferred", Events: []string{shop.EventOrderPlaced},
		Handler: consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
			k := 2
			if ev.ID == bad.ID {
				k = 1 // taken: refused at COMMIT only
			}
			_, err := tx.Exec(ctx, `INSERT INTO deferred_key VALUES ($1)`, k)
			return err
		})})
	p := b.processor(t, "test.deferred")
	res, err := p.Process(ctx, []consumer.Event{bad, good})
	require.NoError(t, err)
	require.Equal(t, dedup.OutcomeFailed, res[0].Outcome)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, res[0].Err, &pgErr)
	require.Equal(t, "23505", pgErr.Code)
	require.Equal(t, dedup.OutcomeProcessed, res[1].Outcome)
	require.Equal(t, 0, b.processedRows(t, bad.ID))
	require.Equal(t, 1, b.processedRows(t, good.ID))
}

func TestProcessNoHandlerIsPermanent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.processor(t, shop.HandlerStockReserve)
	ev := orderEvent(t, 1)
	ev.Name = "order.order.unknown.v1"
	require.False(t, p.Handles(ev.Name))
	rs, err := p.Process(context.Background(), []consumer.Event{ev})
	require.NoError(t, err)
	require.Equal(t, dedup.OutcomeFailed, rs[0].Outcome)
	require.True(t, rs[0].Permanent)
	require.ErrorIs(t, rs[0].Err, dedup.ErrNoHandler)
	require.Equal(t, 0, b.processedRows(t, ev.ID))
}

// Every platformd session carries the timeouts that stop a stuck or
// black-holed worker from holding a processed_event row for hours, and READ
// COMMITTED (the dedup race resolution depends on it).
func TestConnectSessionSettings(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for setting, want := range map[string]string{
		"statement_timeout":                   "30s",
		"idle_in_transaction_session_timeout": "15s",
		"default_transaction_isolation":       "read committed",
		"application_name":                    "platformd",
	} {
		var got string
		require.NoError(t, b.db.QueryRow(ctx, "SELECT current_setting($1)", setting).Scan(&got))
		require.Equal(t, want, got, setting)
	}
	// A session idle inside a transaction is cut by the server.
	db, err := dedup.Connect(ctx, b.dsn, dedup.ConnectConfig{IdleInTransactionTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	defer db.Close()
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }() // before db.Close: a failed wait must not leave the pool waiting on tx
	_, err = tx.Exec(ctx, `INSERT INTO processed_event VALUES (gen_random_uuid(), now())`)
	require.NoError(t, err)
	pid := tx.Conn().PgConn().PID()
	require.Eventually(t, func() bool { // the server ends the idle session
		var n int
		require.NoError(t, b.db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&n))
		return n == 0
	}, 10*time.Second, 20*time.Millisecond, "the session idle in its transaction was not ended by the server")
	require.Error(t, tx.Commit(ctx))
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM processed_event`))
}
