package main_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/testenv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/tracing/tracingtest"
)

// otelVars are the variables that could send the daemon's spans elsewhere
// or change them: each test sets its own (the tests using them are not
// parallel, so the daemon inherits exactly these).
var otelVars = []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
	"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_BSP_SCHEDULE_DELAY"}

func setOTel(t *testing.T, vars map[string]string) {
	for _, k := range otelVars {
		t.Setenv(k, vars[k])
	}
}

// publishTraced publishes one order with a producer's traceparent and
// returns the producer's trace and span ids.
func (e *env) publishTraced(t *testing.T) (traceID, spanID string) {
	t.Helper()
	b := make([]byte, 24)
	_, err := rand.Read(b)
	require.NoError(t, err)
	traceID, spanID = hex.EncodeToString(b[:16]), hex.EncodeToString(b[16:])
	conn, err := amqp.Dial(testenv.AMQPURL())
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	o := shop.OrderPlaced{OrderID: uuid.New(), CustomerID: uuid.New(), Lines: []shop.OrderLine{{ProductID: uuid.New(), Quantity: "1.000"}}}
	payload, err := json.Marshal(o)
	require.NoError(t, err)
	body, err := envelope.Encode(envelope.Envelope{EventID: uuid.Must(uuid.NewV7()), EventName: shop.EventOrderPlaced, OccurredAt: time.Now().UTC(), Payload: payload})
	require.NoError(t, err)
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), e.exchange, shop.EventOrderPlaced, false, false,
		amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body,
			Headers: amqp.Table{"traceparent": "00-" + traceID + "-" + spanID + "-01"}})
	require.NoError(t, err)
	ok, err := dc.WaitContext(context.Background())
	require.NoError(t, err)
	require.True(t, ok)
	return traceID, spanID
}

func (e *env) waitReservations(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return count(t, e.stockDSN, `SELECT count(*) FROM reservation`) == n },
		30*time.Second, 50*time.Millisecond)
}

// The config's endpoint, OTLP/HTTP: spans wait for the schedule delay (an
// hour here), and SIGTERM flushes them: the trace of the last events
// before a stop reaches the collector, in the producer's trace, with the
// resource naming the service, its version and the host.
func TestTracesFlushedAtShutdown(t *testing.T) {
	rcv := tracingtest.New(t)
	setOTel(t, map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "3600000"})
	e := newEnv(t)
	d := e.start(t, e.config(t, "tracing: {endpoint: \""+rcv.HTTPEndpoint+"\"}\n"))
	traceID, spanID := e.publishTraced(t)
	e.waitReservations(t, 1)
	require.Zero(t, rcv.Requests(), "exported before the schedule delay")
	require.NoError(t, d.terminate(t))

	spans := tracingtest.Named(rcv.Spans(), "process e2e.stock."+e.suffix)
	require.Len(t, spans, 1, "stderr: %s", d.stderr)
	s := spans[0]
	require.Equal(t, traceID, s.TraceIDHex())
	require.Equal(t, spanID, s.ParentIDHex())
	v, _ := s.Attr("platformd.outcome")
	require.Equal(t, "processed", v)
	v, _ = s.Attr("platformd.service")
	require.Equal(t, "stock", v)
	require.Equal(t, "platformd", s.Resource["service.name"])
	require.NotEmpty(t, s.Resource["service.version"])
	require.NotEmpty(t, s.Resource["host.name"])
	require.Contains(t, d.stderr.String(), "tracing: exporting spans over OTLP")
}

// The environment wins over the config: its endpoint (gRPC), protocol
// and service name replace the config's, which point nowhere.
func TestTracesEnvironmentWins(t *testing.T) {
	rcv := tracingtest.New(t)
	setOTel(t, map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.GRPCEndpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_SERVICE_NAME": "stock-consumer", "OTEL_BSP_SCHEDULE_DELAY": "50",
	})
	e := newEnv(t)
	d := e.start(t, e.config(t, "tracing: {endpoint: \"http://127.0.0.1:1\", protocol: http/protobuf}\n"))
	traceID, _ := e.publishTraced(t)
	spans, err := rcv.Wait(30*time.Second, func(s []tracingtest.Span) bool {
		return len(tracingtest.Named(s, "process e2e.stock."+e.suffix)) == 1
	})
	require.NoError(t, err, "stderr: %s", d.stderr)
	s := tracingtest.Named(spans, "process e2e.stock."+e.suffix)[0]
	require.Equal(t, traceID, s.TraceIDHex())
	require.Equal(t, "stock-consumer", s.Resource["service.name"])
	require.NoError(t, d.terminate(t))
}

// No endpoint anywhere: the daemon creates no exporter (it says so) and
// sends nothing, though everything else about OTLP is
// set.
func TestTracesOffWithoutEndpoint(t *testing.T) {
	rcv := tracingtest.New(t)
	setOTel(t, map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_SERVICE_NAME": "stock-consumer", "OTEL_BSP_SCHEDULE_DELAY": "10"})
	e := newEnv(t)
	d := e.start(t, e.config(t, "tracing: {protocol: grpc, sampler_ratio: 1}\n"))
	e.publishTraced(t)
	e.waitReservations(t, 1)
	require.NoError(t, d.terminate(t))
	require.Contains(t, d.stderr.String(), "no OTLP endpoint is set")
	require.NotContains(t, d.stderr.String(), "tracing: exporting")
	require.Zero(t, rcv.Requests())
}

// One trace from the producer to the next service: the order's delivery
// to stock is the producer's child; stock.announce_reserved writes
// stock.stock.reserved.v1 to the outbox with that delivery's span as its
// traceparent; the relay publishes it and shipping's delivery of it is the
// child of stock's.
func TestTraceAcrossTheOutbox(t *testing.T) {
	rcv := tracingtest.New(t)
	setOTel(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.HTTPEndpoint, "OTEL_BSP_SCHEDULE_DELAY": "50"})
	e := newEnv(t)
	path := e.config(t, "")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	cfg := strings.Replace(string(b), "handlers: [stock.reserve]", "handlers: [stock.reserve, stock.announce_reserved]", 1)
	cfg = strings.Replace(cfg, "bindings: [order.order.status_changed.v1]\n        handlers: [shipping.track_status]",
		"bindings: [order.order.status_changed.v1, stock.stock.reserved.v1]\n        handlers: [shipping.track_status, shipping.prepare_parcel]", 1)
	require.NotEqual(t, string(b), cfg)
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	d := e.start(t, path)
	traceID, spanID := e.publishTraced(t)

	stockName, shipName := "process e2e.stock."+e.suffix, "process e2e.shipping."+e.suffix
	spans, err := rcv.Wait(60*time.Second, func(s []tracingtest.Span) bool {
		return len(tracingtest.Named(s, stockName)) == 1 && len(tracingtest.Named(s, shipName)) == 1
	})
	require.NoError(t, err, "stderr: %s", d.stderr)
	stock, ship := tracingtest.Named(spans, stockName)[0], tracingtest.Named(spans, shipName)[0]
	require.Equal(t, traceID, stock.TraceIDHex())
	require.Equal(t, spanID, stock.ParentIDHex())
	require.Equal(t, traceID, ship.TraceIDHex(), "the outbox message joined the producer's trace")
	require.Equal(t, stock.SpanIDHex(), ship.ParentIDHex(), "shipping's delivery is the child of stock's")
	rk, _ := ship.Attr("messaging.rabbitmq.destination.routing_key")
	require.Equal(t, shop.EventStockReserved, rk)
	require.Equal(t, 1, count(t, e.shipDSN, `SELECT count(*) FROM parcel`))
	require.NoError(t, d.terminate(t))
}

// A SQL handler's outbox message joins the event's trace too: the release
// binary runs the shop's reservation in SQL plus a statement publishing
// with @traceparent, and the row it writes (the relay is off, so it stays)
// carries the stock delivery span's context, in the producer's trace.
func TestTraceFromASQLHandlersOutbox(t *testing.T) {
	rcv := tracingtest.New(t)
	setOTel(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.HTTPEndpoint, "OTEL_BSP_SCHEDULE_DELAY": "50"})
	e := newEnv(t)
	path := e.sqlConfig(t)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	publishSQL := "          - |\n            SELECT platform.publish('stock.stock.reserved.v1', jsonb_build_object('order_id', @payload->'order_id'),\n" +
		"              jsonb_strip_nulls(jsonb_build_object('traceparent', @traceparent)))\n"
	cfg := strings.Replace(string(b), "    pools:\n      - name: stock-events-", "    outbox: {relay: false}\n    pools:\n      - name: stock-events-", 1)
	cfg = strings.Replace(cfg, "            FROM jsonb_array_elements(@payload->'lines') AS line\n",
		"            FROM jsonb_array_elements(@payload->'lines') AS line\n"+publishSQL, 1)
	require.Contains(t, cfg, "@traceparent")
	require.Contains(t, cfg, "relay: false")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	d := e.start(t, path)
	traceID, spanID := e.publishTraced(t)

	stockName := "process e2e.stock." + e.suffix
	spans, err := rcv.Wait(60*time.Second, func(s []tracingtest.Span) bool { return len(tracingtest.Named(s, stockName)) == 1 })
	require.NoError(t, err, "stderr: %s", d.stderr)
	stock := tracingtest.Named(spans, stockName)[0]
	require.Equal(t, traceID, stock.TraceIDHex())
	require.Equal(t, spanID, stock.ParentIDHex())
	var tp string
	require.Eventually(t, func() bool {
		return count(t, e.stockDSN, `SELECT count(*) FROM platform.outbox`) == 1
	}, 30*time.Second, 50*time.Millisecond)
	conn, err := pgx.Connect(context.Background(), e.stockDSN)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT headers->>'traceparent' FROM platform.outbox`).Scan(&tp))
	require.Equal(t, "00-"+stock.TraceIDHex()+"-"+stock.SpanIDHex()+"-01", tp)
	require.NoError(t, d.terminate(t))
}
