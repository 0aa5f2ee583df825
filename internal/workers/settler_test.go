package workers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/failure"
	"github.com/platformd/platformd/internal/metrics"
)

// fakeChannel records what settling does on a channel, in order; an error
// set for an operation makes it fail (the channel is then closed, as a
// real channel is after a failed ack).
type fakeChannel struct {
	ops     []string
	ackErr  error
	nackErr error
	closed  bool
}

func (c *fakeChannel) Ack(tag uint64, multiple bool) error {
	if c.ackErr != nil {
		c.closed = true
		return c.ackErr
	}
	c.ops = append(c.ops, fmt.Sprintf("ack %d multiple=%v", tag, multiple))
	return nil
}

func (c *fakeChannel) Nack(tag uint64, multiple, requeue bool) error {
	if c.nackErr != nil {
		c.closed = true
		return c.nackErr
	}
	c.ops = append(c.ops, fmt.Sprintf("nack %d multiple=%v requeue=%v", tag, multiple, requeue))
	return nil
}

func (c *fakeChannel) IsClosed() bool { return c.closed }

// fakeCopier confirms every copy unless its destination (exchange/routing
// key) is in refuse; it logs its publishes into the channel's op list so that the order is visible.
type fakeCopier struct {
	ch     *fakeChannel
	refuse map[string]error
	sent   []broker.Outgoing
}

func (p *fakeCopier) Publish(_ context.Context, out []broker.Outgoing) []error {
	errs := make([]error, len(out))
	for i, o := range out {
		p.sent = append(p.sent, o)
		p.ch.ops = append(p.ch.ops, "publish "+o.Exchange+"/"+o.RoutingKey)
		errs[i] = p.refuse[o.Exchange+"/"+o.RoutingKey]
	}
	return errs
}

// fakeStore stands for the failure store in the settler's unit tests (the
// pool tests write to the real one): it logs its writes into the channel's
// op list so that their order against the acks is visible, and fails when
// err is set.
type fakeStore struct {
	ch      *fakeChannel
	err     error
	entries []failure.Entry
}

func (s *fakeStore) Write(_ context.Context, entries []failure.Entry) ([]failure.Written, error) {
	if s.err != nil {
		return nil, s.err
	}
	out := make([]failure.Written, len(entries))
	for i, e := range entries {
		s.entries = append(s.entries, e)
		s.ch.ops = append(s.ch.ops, "store "+e.Reason)
		out[i] = failure.Written{ID: uuid.Must(uuid.NewV7()), State: e.State}
	}
	return out, nil
}

type settleBundle struct {
	ch      *fakeChannel
	pub     *fakeCopier
	store   *fakeStore
	metrics *metrics.Metrics
	st      *settler
}

func newSettleBundle(t *testing.T, limit int) *settleBundle {
	t.Helper()
	ch := &fakeChannel{}
	m := metrics.New()
	b := &settleBundle{ch: ch, pub: &fakeCopier{ch: ch, refuse: map[string]error{}}, store: &fakeStore{ch: ch}, metrics: m}
	b.st = &settler{
		ch: ch, pub: b.pub, store: b.store, queue: "q", pool: "p", delays: []time.Duration{time.Second, 10 * time.Second},
		limit: limit, timeout: time.Second, count: &counters{m: newPoolMetrics(m, "svc", "p")},
		log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	return b
}

// outcome reads platformd_messages_total for o (whole counts).
func (b *settleBundle) outcome(o string) int {
	return int(testutil.ToFloat64(b.metrics.MessagesTotal.WithLabelValues("svc", "p", o)))
}

// duplicates reads platformd_duplicates_total for source.
func (b *settleBundle) duplicates(source string) int {
	return int(testutil.ToFloat64(b.metrics.DuplicatesTotal.WithLabelValues("svc", "p", source)))
}

func msg(tag uint64, s settlement) message {
	return message{d: amqp.Delivery{DeliveryTag: tag, RoutingKey: "order.order.placed.v1", Body: []byte(`{}`)}, s: s}
}

var (
	processed = settlement{kind: settleAck, outcome: metrics.OutcomeProcessed}
	requeue   = settlement{kind: settleRequeue}
)

func duplicate(source string) settlement {
	return settlement{kind: settleAck, outcome: metrics.OutcomeDuplicate, source: source}
}

func retry(attempt int) settlement {
	return settlement{kind: settleRetry, attempt: attempt, err: "flaky: boom", outcome: metrics.OutcomeRetried}
}

func failed(reason string) settlement {
	return settlement{kind: settleFail, reason: reason, err: "bad: boom", outcome: metrics.OutcomeFailed}
}

func never() bool  { return false }
func always() bool { return true }

func TestSettleCommittedBatchIsAckedOnceUpToItsHighestTag(t *testing.T) {
	t.Parallel()
	b := newSettleBundle(t, 100)
	require.True(t, b.st.settle(context.Background(), []message{msg(3, processed), msg(1, processed), msg(2, duplicate(metrics.SourceRedelivery))}, never))
	require.Equal(t, []string{"ack 3 multiple=true"}, b.ch.ops)
	require.Equal(t, 2, b.outcome(metrics.OutcomeProcessed))
	require.Equal(t, 1, b.outcome(metrics.OutcomeDuplicate))
	require.Equal(t, 1, b.duplicates(metrics.SourceRedelivery))
}

func TestSettleHoldsTheAckWhileMoreDeliveriesWait(t *testing.T) {
	t.Parallel()
	b := newSettleBundle(t, 100)
	ctx := context.Background()
	require.True(t, b.st.settle(ctx, []message{msg(1, processed), msg(2, processed)}, always))
	require.Empty(t, b.ch.ops, "no ack while the next batch can carry it")
	require.Zero(t, b.outcome(metrics.OutcomeProcessed), "nothing counted before its ack is sent")
	require.True(t, b.st.settle(ctx, []message{msg(3, processed)}, never))
	require.Equal(t, []string{"ack 3 multiple=true"}, b.ch.ops, "one ack frame for both batches")
	require.Equal(t, 3, b.outcome(metrics.OutcomeProcessed))
}

func TestSettleHeldAcksStayWithinTheLimit(t *testing.T) {
	t.Parallel()
	b := newSettleBundle(t, 2)
	ctx := context.Background()
	require.True(t, b.st.settle(ctx, []message{msg(1, processed), msg(2, processed)}, always))
	require.Empty(t, b.ch.ops)
	require.True(t, b.st.settle(ctx, []message{msg(3, processed)}, always))
	require.Equal(t, []string{"ack 3 multiple=true"}, b.ch.ops, "three settled deliveries exceed the limit of two: acked now")
}

func TestSettleFlushSendsTheHeldAck(t *testing.T) {
	t.Parallel()
	b := newSettleBundle(t, 100)
	require.True(t, b.st.settle(context.Background(), []message{msg(1, processed)}, always))
	require.True(t, b.st.flush())
	require.Equal(t, []string{"ack 1 multiple=true"}, b.ch.ops)
	require.True(t, b.st.flush(), "nothing held: nothing sent")
	require.Len(t, b.ch.ops, 1)
	require.Equal(t, 1, b.outcome(metrics.OutcomeProcessed))
}

func TestSettleCopiesAreConfirmedBeforeTheirOriginalsAreAcked(t *testing.T) {
	t.Parallel()
	b := newSettleBundle(t, 100)
	ok := b.st.settle(context.Background(), []message{msg(1, processed), msg(2, retry(2)), msg(3, failed(broker.ReasonPermanent))}, always)
	require.True(t, ok)
	require.Equal(t, []string{"store permanent", "publish platformd.retry.10s/q", "ack 3 multiple=true"}, b.ch.ops,
		"the failure stored and the retry copy confirmed first; a batch with either never holds its ack")
	require.Equal(t, 1, b.outcome(metrics.OutcomeProcessed))
	require.Equal(t, 1, b.outcome(metrics.OutcomeRetried))
	require.Equal(t, 1, b.outcome(metrics.OutcomeFailed))
	require.InDelta(t, 1, testutil.ToFloat64(b.metrics.FailuresTotal.WithLabelValues("svc", "p", broker.ReasonPermanent)), 0)

	retried := b.pub.sent[0].Msg
	require.EqualValues(t, 2, retried.Headers[broker.HeaderAttempt], "the retry copy carries its attempt")
	require.Equal(t, "flaky: boom", retried.Headers[broker.HeaderError])
	require.Equal(t, "order.order.placed.v1", retried.Headers[broker.HeaderOriginalRoutingKey])
	require.NotContains(t, retried.Headers, failure.HeaderFailureID, "an ordinary retry settles no stored failure")
	stored := b.store.entries[0]
	require.Equal(t, broker.ReasonPermanent, stored.Reason)
	require.Equal(t, "bad: boom", stored.Error)
	require.Equal(t, "p", stored.Pool)
	require.Equal(t, failure.StateFailed, stored.State)
	require.Equal(t, "order.order.placed.v1", stored.RoutingKey)
}

func TestSettleFailuresNotStoredRequeueTheirOriginals(t *testing.T) {
	t.Parallel()
	b := newSettleBundle(t, 100)
	b.store.err = errors.New("database away")
	ok := b.st.settle(context.Background(), []message{msg(1, processed), msg(2, failed(broker.ReasonRetriesExhausted)), msg(3, retry(1))}, always)
	require.True(t, ok)
	require.Equal(t, []string{"publish platformd.retry.1s/q", "nack 2 multiple=false requeue=true", "ack 3 multiple=true"}, b.ch.ops,
		"a failure whose row did not commit goes back to its queue; the others are acked")
	require.Zero(t, b.outcome(metrics.OutcomeFailed), "a requeued delivery is not counted failed")
	require.Equal(t, 1, b.outcome(metrics.OutcomeRetried))
}

// A retry of a copy that settles a stored failure updates the row before
// its copy goes, and the copy carries the row's id.
func TestSettleARetriedFailureKeepsItsRow(t *testing.T) {
	t.Parallel()
	b := newSettleBundle(t, 100)
	m := msg(1, retry(1))
	m.ev.Delivery.FailureID = uuid.Must(uuid.NewV7())
	require.True(t, b.st.settle(context.Background(), []message{m}, always))
	require.Equal(t, []string{"store retrying", "publish platformd.retry.1s/q", "ack 1 multiple=true"}, b.ch.ops)
	require.Equal(t, m.ev.Delivery.FailureID, b.store.entries[0].FailureID)
	require.Equal(t, failure.StateRetrying, b.store.entries[0].State)
	require.NotEmpty(t, b.pub.sent[0].Msg.Headers[failure.HeaderFailureID])
}

func TestSettleAnUnconfirmedCopyRequeuesItsOriginal(t *testing.T) {
	t.Parallel()
	b := newSettleBundle(t, 100)
	b.pub.refuse["platformd.retry.1s/q"] = broker.ErrReturned
	ok := b.st.settle(context.Background(), []message{msg(1, processed), msg(2, retry(1)), msg(3, processed)}, always)
	require.True(t, ok)
	require.Equal(t, []string{"publish platformd.retry.1s/q", "nack 2 multiple=false requeue=true", "ack 3 multiple=true"}, b.ch.ops,
		"the original of a copy not confirmed goes back to its queue; the others are acked")
	require.Zero(t, b.outcome(metrics.OutcomeRetried), "a requeued delivery is not counted retried")
}

func TestSettleAnUnknownOutcomeRequeuesEverythingAndAcksNothing(t *testing.T) {
	t.Parallel()
	b := newSettleBundle(t, 100)
	ctx := context.Background()
	require.True(t, b.st.settle(ctx, []message{msg(1, processed)}, always)) // held
	require.True(t, b.st.settle(ctx, []message{msg(2, requeue), msg(3, requeue)}, always))
	require.Equal(t, []string{"nack 2 multiple=false requeue=true", "nack 3 multiple=false requeue=true", "ack 1 multiple=true"}, b.ch.ops,
		"the held ack of the committed batch is sent; the batch of unknown outcome is requeued delivery by delivery")
	require.Equal(t, 1, b.outcome(metrics.OutcomeProcessed))
}

func TestSettleABatchWithARequeueNeverHoldsItsAck(t *testing.T) {
	t.Parallel()
	b := newSettleBundle(t, 100)
	require.True(t, b.st.settle(context.Background(), []message{msg(1, processed), msg(2, requeue), msg(3, processed)}, always))
	require.Equal(t, []string{"nack 2 multiple=false requeue=true", "ack 3 multiple=true"}, b.ch.ops)
}

func TestSettleAFailedAckReportsTheChannelGoneAndCountsNothing(t *testing.T) {
	t.Parallel()
	b := newSettleBundle(t, 100)
	b.ch.ackErr = amqp.ErrClosed
	require.False(t, b.st.settle(context.Background(), []message{msg(1, processed), msg(2, retry(1))}, never))
	require.Zero(t, b.outcome(metrics.OutcomeProcessed), "the broker redelivers what was not acked: counted when it settles")
	require.Zero(t, b.outcome(metrics.OutcomeRetried))
	require.True(t, b.st.flush(), "the failed ack is not held for another try on a dead channel")
}

func TestSettleAFailedNackReportsTheChannelGone(t *testing.T) {
	t.Parallel()
	b := newSettleBundle(t, 100)
	b.ch.nackErr = errors.New("channel closed")
	require.False(t, b.st.settle(context.Background(), []message{msg(1, processed), msg(2, requeue)}, never))
	require.Empty(t, b.ch.ops, "nothing is acked after a failed nack")
}

func TestSettleDuplicatesAreCountedBySource(t *testing.T) {
	t.Parallel()
	b := newSettleBundle(t, 100)
	batch := []message{
		msg(1, duplicate(metrics.SourceRedelivery)), msg(2, duplicate(metrics.SourceReplay)),
		msg(3, duplicate(metrics.SourceRepublish)), msg(4, duplicate(metrics.SourceRepublish)),
	}
	require.True(t, b.st.settle(context.Background(), batch, never))
	require.Equal(t, 4, b.outcome(metrics.OutcomeDuplicate))
	require.Equal(t, 1, b.duplicates(metrics.SourceRedelivery))
	require.Equal(t, 1, b.duplicates(metrics.SourceReplay))
	require.Equal(t, 2, b.duplicates(metrics.SourceRepublish))
	require.EqualValues(t, 4, b.st.count.duplicates.Load())
	require.EqualValues(t, 2, b.st.count.dupRepublish.Load())
}

func TestSettleAChannelClosedMeanwhileReportsGone(t *testing.T) {
	t.Parallel()
	b := newSettleBundle(t, 100)
	b.ch.closed = true
	require.False(t, b.st.settle(context.Background(), []message{msg(1, processed)}, always))
}

// A channel that died while its batch was in the database gets no copies:
// its deliveries all come back, failures included, and a copy now would be
// a second one.
func TestSettleNoCopiesOnADeadChannel(t *testing.T) {
	t.Parallel()
	b := newSettleBundle(t, 100)
	b.ch.closed = true
	require.False(t, b.st.settle(context.Background(), []message{msg(1, retry(1)), msg(2, failed(broker.ReasonPermanent))}, always))
	require.Empty(t, b.pub.sent)
	require.Empty(t, b.store.entries, "nor a row: its redelivery fails again and stores it")
	require.Zero(t, b.outcome(metrics.OutcomeRetried)+b.outcome(metrics.OutcomeFailed))
}

// The error names the failing handler once: prefixed by the worker when the
// handler's error does not name it, left alone when it already does (the
// shop's "stock.reserve: event ...: payload: ...").
func TestSettleXErrorNamesTheHandlerOnce(t *testing.T) {
	t.Parallel()
	b := newSettleBundle(t, 100)
	r := rules{pool: "p", queue: "q"}
	id := uuid.New()
	d := amqp.Delivery{DeliveryTag: 1, RoutingKey: "order.order.placed.v1", Body: []byte(`{}`)}
	fail := func(err error) message {
		res := dedup.Result{Outcome: dedup.OutcomeFailed, Permanent: true, Handler: "stock.reserve", Err: err}
		return message{d: d, s: r.settlementOf(&d, consumer.Event{ID: id}, res)}
	}
	named := fmt.Errorf("stock.reserve: event %s: payload: %w", id, errors.New("lines[0].quantity: must be positive"))
	require.True(t, b.st.settle(context.Background(), []message{fail(named), fail(errors.New("boom"))}, never))
	require.Len(t, b.store.entries, 2)
	require.Equal(t, "stock.reserve: event "+id.String()+": payload: lines[0].quantity: must be positive", b.store.entries[0].Error)
	require.Equal(t, "stock.reserve: boom", b.store.entries[1].Error)
	require.Equal(t, "stock.reserve", b.store.entries[1].Handler)
}
