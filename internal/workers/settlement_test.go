package workers

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/failure"
	"github.com/platformd/platformd/internal/metrics"
)

func testRules() rules {
	return rules{
		pool: "p", queue: "q", maxBodyBytes: 1 << 20,
		handles:    func(name string) bool { return name == "order.order.placed.v1" },
		horizon:    24 * time.Hour,
		quarantine: true,
		delays:     []time.Duration{time.Second, 10 * time.Second},
	}
}

func body(t *testing.T, id uuid.UUID, name string, at time.Time) []byte {
	t.Helper()
	b, err := envelope.Encode(envelope.Envelope{EventID: id, EventName: name, OccurredAt: at, Payload: []byte(`{"order_id":"x"}`)})
	require.NoError(t, err)
	return b
}

// v7At returns a UUID v7 whose timestamp is at.
func v7At(at time.Time) uuid.UUID {
	id := uuid.Must(uuid.NewV7())
	ms := uint64(at.UnixMilli())
	for i := range 6 {
		id[i] = byte(ms >> (40 - 8*i))
	}
	return id
}

func TestDecodeSettlesWhatCannotRun(t *testing.T) {
	t.Parallel()
	now := time.Now()
	fresh := uuid.Must(uuid.NewV7())
	old := v7At(now.Add(-48 * time.Hour)) // beyond the 24h horizon
	tests := []struct {
		name     string
		d        amqp.Delivery
		runs     bool
		reason   string
		outcome  string
		mutate   func(*rules)
		contains string
	}{
		{name: "a valid event of a handled name runs",
			d: amqp.Delivery{Body: body(t, fresh, "order.order.placed.v1", now)}, runs: true},
		{name: "a body that is not an envelope is rejected with reason decode",
			d: amqp.Delivery{Body: []byte(`{"event_id": 1}`)}, reason: broker.ReasonDecode, outcome: metrics.OutcomeRejected},
		{name: "an event no handler of the pool handles is rejected with reason no_handler",
			d:      amqp.Delivery{Body: body(t, fresh, "order.order.cancelled.v1", now)},
			reason: broker.ReasonNoHandler, outcome: metrics.OutcomeRejected, contains: `"order.order.cancelled.v1"`},
		{name: "an event older than the horizon by its v7 id is quarantined with reason beyond_horizon",
			d:      amqp.Delivery{Body: body(t, old, "order.order.placed.v1", now)},
			reason: broker.ReasonBeyondHorizon, outcome: metrics.OutcomeRejected, contains: "replay horizon"},
		{name: "the operator's override header lets an old event through the guard",
			d: amqp.Delivery{Body: body(t, old, "order.order.placed.v1", now), Headers: amqp.Table{broker.HeaderBeyondHorizonOverride: true}}, runs: true},
		{name: "with the process policy an old event runs",
			d: amqp.Delivery{Body: body(t, old, "order.order.placed.v1", now)}, runs: true,
			mutate: func(r *rules) { r.quarantine = false }},
		{name: "a v4 id is judged by occurred_at",
			d:      amqp.Delivery{Body: body(t, uuid.New(), "order.order.placed.v1", now.Add(-25*time.Hour))},
			reason: broker.ReasonBeyondHorizon, outcome: metrics.OutcomeRejected},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := testRules()
			if tc.mutate != nil {
				tc.mutate(&r)
			}
			batch := []message{{d: tc.d}}
			events := r.decode(batch, now, nil)
			m := batch[0]
			require.Equal(t, tc.runs, m.runs())
			if tc.runs {
				require.Len(t, events, 1)
				require.Equal(t, m.ev.ID, events[0].ID)
				return
			}
			require.Empty(t, events)
			require.Equal(t, settleFail, m.s.kind)
			require.Equal(t, tc.reason, m.s.reason)
			require.Equal(t, tc.outcome, m.s.outcome)
			require.Contains(t, m.s.err, tc.contains)
		})
	}
}

func TestDecideTurnsResultsIntoSettlements(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	tests := []struct {
		name    string
		d       amqp.Delivery
		attempt int
		res     dedup.Result
		want    settlement
	}{
		{name: "a processed event is acked",
			res: dedup.Result{Outcome: dedup.OutcomeProcessed}, want: settlement{kind: settleAck, outcome: metrics.OutcomeProcessed}},
		{name: "a duplicate flagged redelivered counts as a redelivery",
			d: amqp.Delivery{Redelivered: true}, res: dedup.Result{Outcome: dedup.OutcomeDuplicate},
			want: settlement{kind: settleAck, outcome: metrics.OutcomeDuplicate, source: metrics.SourceRedelivery}},
		{name: "a duplicate sent back by replay tooling counts as a replay, redelivered or not",
			d: amqp.Delivery{Redelivered: true, Headers: amqp.Table{broker.HeaderReplay: "x"}}, res: dedup.Result{Outcome: dedup.OutcomeDuplicate},
			want: settlement{kind: settleAck, outcome: metrics.OutcomeDuplicate, source: metrics.SourceReplay}},
		{name: "any other duplicate is a republish",
			res:  dedup.Result{Outcome: dedup.OutcomeDuplicate},
			want: settlement{kind: settleAck, outcome: metrics.OutcomeDuplicate, source: metrics.SourceRepublish}},
		{name: "a failure with attempts left goes to the first delay queue",
			res:  dedup.Result{Outcome: dedup.OutcomeFailed, Err: boom, Handler: "h"},
			want: settlement{kind: settleRetry, attempt: 1, err: "h: boom", handler: "h", outcome: metrics.OutcomeRetried}},
		{name: "a failure of the first retry goes to the second delay queue",
			attempt: 1, res: dedup.Result{Outcome: dedup.OutcomeFailed, Err: boom},
			want: settlement{kind: settleRetry, attempt: 2, err: "boom", outcome: metrics.OutcomeRetried}},
		{name: "a failure of the last attempt goes to the failure store as retries_exhausted",
			attempt: 2, res: dedup.Result{Outcome: dedup.OutcomeFailed, Err: boom, Handler: "h"},
			want: settlement{kind: settleFail, reason: broker.ReasonRetriesExhausted, err: "h: boom", handler: "h", outcome: metrics.OutcomeFailed}},
		{name: "a permanent failure goes to the failure store at once",
			res:  dedup.Result{Outcome: dedup.OutcomeFailed, Err: consumer.Permanent(boom), Permanent: true, Handler: "h"},
			want: settlement{kind: settleFail, reason: broker.ReasonPermanent, err: "h: boom", handler: "h", outcome: metrics.OutcomeFailed}},
		{name: "an event parked behind its key's failure in the batch is stored parked",
			res:  dedup.Result{Outcome: dedup.OutcomeParked},
			want: settlement{kind: settlePark, reason: failure.ReasonParked, err: `parked: an earlier event of key "" failed in the same batch`, outcome: metrics.OutcomeRetried}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id := uuid.Must(uuid.NewV7())
			batch := []message{{d: tc.d, ev: consumer.Event{ID: id, Attempt: tc.attempt}}}
			testRules().decide(batch, []dedup.Result{tc.res}, nil)
			tc.want.eventID = id
			got := batch[0].s
			if got.outcome == metrics.OutcomeDuplicate { // the age of an id minted now
				require.GreaterOrEqual(t, got.age, time.Duration(0))
				require.Less(t, got.age, time.Second)
				got.age = 0
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// A duplicate's age is the time since its UUID v7 id was minted, or since
// its occurred_at when the id is not a v7 (docs/operations.md, "Tuning a horizon").
func TestDecideGivesDuplicatesTheirAge(t *testing.T) {
	t.Parallel()
	minted := time.Now().Add(-2 * time.Hour)
	v7 := v7At(minted)
	v4 := uuid.New()
	batch := []message{
		{ev: consumer.Event{ID: v7}},
		{ev: consumer.Event{ID: v4, OccurredAt: time.Now().Add(-3 * 24 * time.Hour)}},
	}
	dup := dedup.Result{Outcome: dedup.OutcomeDuplicate}
	testRules().decide(batch, []dedup.Result{dup, dup}, nil)
	require.InDelta(t, (2 * time.Hour).Seconds(), batch[0].s.age.Seconds(), 1)
	require.InDelta(t, (3 * 24 * time.Hour).Seconds(), batch[1].s.age.Seconds(), 1)
}

// A negative x-attempt (a producer's or republisher's header) reads as a
// first delivery: its failure goes to the first delay queue, where it once
// indexed the delays at -1 and crashed the daemon on every redelivery.
func TestNegativeAttemptIsAFirstDelivery(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, h := range []any{int32(-1), int64(-7), "-3"} {
		r := testRules()
		batch := []message{{d: amqp.Delivery{Body: body(t, uuid.Must(uuid.NewV7()), "order.order.placed.v1", now),
			Headers: amqp.Table{broker.HeaderAttempt: h}}}}
		events := r.decode(batch, now, nil)
		require.Len(t, events, 1)
		require.Zero(t, events[0].Attempt, "%T %v", h, h)
		r.decide(batch, []dedup.Result{{Outcome: dedup.OutcomeFailed, Err: errors.New("boom")}}, nil)
		require.Equal(t, settleRetry, batch[0].s.kind)
		require.Equal(t, 1, batch[0].s.attempt)
		require.Equal(t, time.Second, r.delays[batch[0].s.attempt-1])
	}
}

func TestDecideMatchesResultsToTheMessagesThatRan(t *testing.T) {
	t.Parallel()
	rejected := settlement{kind: settleFail, reason: broker.ReasonDecode, outcome: metrics.OutcomeRejected}
	batch := []message{{s: rejected}, {ev: consumer.Event{ID: uuid.New()}}, {s: rejected}, {ev: consumer.Event{ID: uuid.New()}}}
	testRules().decide(batch, []dedup.Result{{Outcome: dedup.OutcomeDuplicate}, {Outcome: dedup.OutcomeProcessed}}, nil)
	require.Equal(t, rejected, batch[0].s, "a settlement decided at decode stays")
	require.Equal(t, metrics.OutcomeDuplicate, batch[1].s.outcome)
	require.Equal(t, rejected, batch[2].s)
	require.Equal(t, metrics.OutcomeProcessed, batch[3].s.outcome)
}

func TestDecideRequeuesEverythingThatRanWhenTheOutcomeIsUnknown(t *testing.T) {
	t.Parallel()
	rejected := settlement{kind: settleFail, reason: broker.ReasonNoHandler, outcome: metrics.OutcomeRejected}
	batch := []message{{ev: consumer.Event{ID: uuid.New()}}, {s: rejected}}
	testRules().decide(batch, nil, errors.New("connection reset"))
	require.Equal(t, settleRequeue, batch[0].s.kind)
	require.Equal(t, rejected, batch[1].s, "a rejected message still goes to the failure queue")
}
