package dedup_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/fixture/shop"
)

// TestProcessOutcomes is the dedup step's contract, one batch per case:
// what each event of the batch comes to, whether its processed_event row
// exists afterwards, and whether its effects (the stock reservation) are
// there.
func TestProcessOutcomes(t *testing.T) {
	t.Parallel()
	const (
		processed = dedup.OutcomeProcessed
		duplicate = dedup.OutcomeDuplicate
		failed    = dedup.OutcomeFailed
	)
	type step struct {
		// event is an index into the case's events: the same index is the
		// same event id.
		event int
		// fail is how the test handler fails for this event ("", "error",
		// "permanent", "sql", "panic").
		fail string
		// name overrides the event's name.
		name string
	}
	tests := []struct {
		name string
		// before is processed (and committed) before the batch.
		before []int
		batch  []step
		want   []dedup.Outcome
		// rows says, per event index, whether its row and effects exist
		// after the batch.
		rows map[int]bool
		// permanent says which steps fail permanently.
		permanent map[int]bool
	}{
		{name: "a new event is processed: its row and its effects commit together",
			batch: []step{{event: 0}}, want: []dedup.Outcome{processed}, rows: map[int]bool{0: true}},
		{name: "an event already committed is a duplicate and its handlers are not called again",
			before: []int{0}, batch: []step{{event: 0}}, want: []dedup.Outcome{duplicate}, rows: map[int]bool{0: true}},
		{name: "the same id twice in one batch is processed once and the second copy is a duplicate",
			batch: []step{{event: 0}, {event: 0}}, want: []dedup.Outcome{processed, duplicate}, rows: map[int]bool{0: true}},
		{name: "a failing event leaves no row while the rest of its batch commits",
			batch: []step{{event: 0}, {event: 1, fail: "error"}, {event: 2}},
			want:  []dedup.Outcome{processed, failed, processed}, rows: map[int]bool{0: true, 1: false, 2: true}},
		{name: "a failing SQL statement aborts only its own event's savepoint",
			batch: []step{{event: 0, fail: "sql"}, {event: 1}},
			want:  []dedup.Outcome{failed, processed}, rows: map[int]bool{0: false, 1: true}},
		{name: "a panicking handler fails its event alone",
			batch: []step{{event: 0}, {event: 1, fail: "panic"}},
			want:  []dedup.Outcome{processed, failed}, rows: map[int]bool{0: true, 1: false}},
		{name: "a permanent error is reported permanent",
			batch: []step{{event: 0, fail: "permanent"}}, want: []dedup.Outcome{failed},
			rows: map[int]bool{0: false}, permanent: map[int]bool{0: true}},
		{name: "an event no handler handles fails permanently without a row",
			batch: []step{{event: 0, name: "order.order.cancelled.v1"}, {event: 1}}, want: []dedup.Outcome{failed, processed},
			rows: map[int]bool{0: false, 1: true}, permanent: map[int]bool{0: true}},
		{name: "a duplicate and a failure in one batch: the duplicate stays a duplicate in the isolated replay",
			before: []int{0}, batch: []step{{event: 0}, {event: 1, fail: "error"}, {event: 2}},
			want: []dedup.Outcome{duplicate, failed, processed}, rows: map[int]bool{0: true, 1: false, 2: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			events := map[int]consumer.Event{}
			event := func(i int) consumer.Event {
				if _, ok := events[i]; !ok {
					events[i] = orderEvent(t, 1)
				}
				return events[i]
			}
			fails := map[uuid.UUID]string{}
			b.reg.MustRegister(consumer.Registration{
				Name: "test.outcome", Events: []string{shop.EventOrderPlaced},
				Handler: consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
					switch fails[ev.ID] {
					case "error":
						return errors.New("transient")
					case "permanent":
						return consumer.Permanent(errors.New("bad payload"))
					case "sql":
						_, err := tx.Exec(ctx, `SELECT 1/0`)
						return err
					case "panic":
						panic("handler bug")
					}
					return nil
				}),
			})
			p := b.processor(t, shop.HandlerStockReserve, "test.outcome")
			for _, i := range tc.before {
				rs, err := p.Process(ctx, []consumer.Event{event(i)})
				require.NoError(t, err)
				require.Equal(t, processed, rs[0].Outcome)
			}
			var batch []consumer.Event
			for _, st := range tc.batch {
				ev := event(st.event)
				if st.name != "" {
					ev.Name = st.name
				}
				if st.fail != "" {
					fails[ev.ID] = st.fail
				}
				batch = append(batch, ev)
			}
			rs, err := p.Process(ctx, batch)
			require.NoError(t, err)
			require.Equal(t, tc.want, outcomes(rs))
			for k, r := range rs {
				require.Equal(t, tc.permanent[k], r.Permanent, "step %d permanent", k)
				if r.Outcome == failed {
					require.Error(t, r.Err, "step %d", k)
				}
			}
			for i, exists := range tc.rows {
				n := 0
				if exists {
					n = 1
				}
				require.Equal(t, n, b.processedRows(t, events[i].ID), "event %d row", i)
				require.Equal(t, n, b.reservations(t, events[i]), "event %d effects", i)
			}
		})
	}
}
