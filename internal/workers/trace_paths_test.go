package workers

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/tracing"
	"github.com/platformd/platformd/internal/tracing/tracingtest"
)

// Every kind of settlement, undecoded deliveries, producers' sampled and
// unsampled parents with trace state, retries, failures, requeues and a
// channel lost before the acks: each delivery propagates a valid span
// context and exports at most one span, which names its routing key.
// (This compared platformd's own span recorder with the SDK while there
// were two paths; the SDK is now the only one.)
func TestDeliverySpansOfEverySettlement(t *testing.T) {
	rcv := tracingtest.New(t)
	sdk := runTracedBatches(t, rcv)
	require.Len(t, sdk.contexts, 36) // nine deliveries, four ways
	require.NotEmpty(t, sdk.spans)
	for rk := range sdk.spans {
		require.Contains(t, sdk.contexts, rk)
	}
}

// tracedRun is what one run of the batches exported and propagated, keyed
// by each delivery's routing key (unique per delivery).
type tracedRun struct {
	spans    map[string]*tracepb.Span
	contexts map[string]string // trace id, flags, trace state, remote
	resource map[string]string
}

func runTracedBatches(t *testing.T, rcv *tracingtest.Receiver) tracedRun {
	t.Helper()
	before := len(rcv.Spans())
	tp, err := tracing.New(context.Background(), tracing.Config{Endpoint: rcv.HTTPEndpoint, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer tp.Stop()
	p := &Pool{cfg: Config{Name: "stock-events", Service: "stock", Topology: broker.Topology{Queue: "stock.events",
		RetryDelays: []time.Duration{time.Second, time.Minute}}}}
	w := &worker{pool: p, tr: newTracer(p.cfg, tp.Tracer())}

	sampled := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	unsampled := "00-1af7651916cd43dd8448eb211c80319c-c7ad6b7169203331-00"
	event := func(rk string, attempt int) consumer.Event {
		return consumer.Event{ID: uuid.NewSHA1(uuid.NameSpaceOID, []byte(rk)), Attempt: attempt, Delivery: consumer.Delivery{RoutingKey: rk}}
	}
	type delivery struct {
		rk      string
		headers amqp.Table
		decoded bool
		attempt int
		s       settlement
	}
	cases := []delivery{
		{rk: "ack.processed", decoded: true, s: settlement{kind: settleAck, outcome: metrics.OutcomeProcessed}},
		{rk: "ack.duplicate.child", decoded: true, headers: amqp.Table{"traceparent": sampled, "tracestate": "vendor=a,other=b"},
			s: settlement{kind: settleAck, outcome: metrics.OutcomeDuplicate}},
		{rk: "random.flag", decoded: true, headers: amqp.Table{"traceparent": "00-2af7651916cd43dd8448eb211c80319c-d7ad6b7169203331-03"},
			s: settlement{kind: settleAck, outcome: metrics.OutcomeProcessed}},
		{rk: "unsampled.parent", decoded: true, headers: amqp.Table{"traceparent": unsampled},
			s: settlement{kind: settleAck, outcome: metrics.OutcomeProcessed}},
		{rk: "retry.first", decoded: true, s: settlement{kind: settleRetry, attempt: 1, err: "stock service: timeout",
			outcome: metrics.OutcomeRetried}},
		{rk: "retry.second", decoded: true, attempt: 1, headers: amqp.Table{"traceparent": sampled, broker.HeaderAttempt: int32(1)},
			s: settlement{kind: settleRetry, attempt: 2, err: "again", outcome: metrics.OutcomeRetried}},
		{rk: "fail.handler", decoded: true, attempt: 2, s: settlement{kind: settleFail, reason: "handler", err: "no stock",
			outcome: metrics.OutcomeFailed}},
		{rk: "fail.undecoded", headers: amqp.Table{broker.HeaderAttempt: int32(3)},
			s: settlement{kind: settleFail, reason: "decode", err: "not JSON", outcome: metrics.OutcomeRejected}},
		{rk: "requeue", decoded: true, s: settlement{kind: settleRequeue}},
	}
	out := tracedRun{spans: map[string]*tracepb.Span{}, contexts: map[string]string{}}
	start := time.Unix(1_800_000_000, 0)
	for _, batchErr := range []error{nil, fmt.Errorf("commit: connection reset")} {
		for _, alive := range []bool{true, false} {
			suffix := fmt.Sprintf(".%t.%t", batchErr == nil, alive)
			batch := make([]message, len(cases))
			for i, c := range cases {
				batch[i] = message{d: amqp.Delivery{RoutingKey: c.rk + suffix, Headers: maps.Clone(c.headers)}}
				if c.decoded {
					batch[i].ev = event(c.rk+suffix, c.attempt)
				}
			}
			events := make([]consumer.Event, len(batch))
			w.startSpans(batch, events, start)
			for i, c := range cases {
				batch[i].s = c.s
				sc := batch[i].sc
				tid := "(a new trace)"
				if _, ok := c.headers["traceparent"]; ok {
					tid = sc.TraceID().String()
				}
				require.True(t, sc.IsValid(), "a span context for %s", c.rk)
				out.contexts[c.rk+suffix] = fmt.Sprintf("%s %s %q %t", tid, sc.TraceFlags(), sc.TraceState(), sc.IsRemote())
			}
			w.stampCopies(context.Background(), batch)
			w.endSpans(batch, batchErr, alive)
		}
	}
	require.NoError(t, tp.ForceFlush(context.Background()))
	for _, s := range rcv.Spans()[before:] {
		rk, ok := s.Attr("messaging.rabbitmq.destination.routing_key")
		require.True(t, ok, "a delivery span without a routing key: %v", s.Span)
		require.NotContains(t, out.spans, rk, "two spans for one delivery")
		out.spans[rk], out.resource = normalized(s.Span), s.Resource
	}
	return out
}

// normalized is s without what differs between two runs of the same calls:
// the random ids (a child keeps its parent's trace id) and the instants
// the calls took themselves (the end, the events'); the attributes and
// events in their order.
func normalized(s *tracepb.Span) *tracepb.Span {
	s = proto.Clone(s).(*tracepb.Span)
	if len(s.GetParentSpanId()) == 0 {
		s.TraceId = nil
	}
	s.SpanId, s.EndTimeUnixNano = nil, 0
	for _, e := range s.GetEvents() {
		e.TimeUnixNano = 0
	}
	return s
}
