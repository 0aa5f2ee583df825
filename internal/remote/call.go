package remote

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/metrics"
)

// UnavailableError is a call the handler did not answer: refused, a TLS
// failure, no answer within the timeout, or 429, 502, 503 or 504. Nothing
// is applied and no attempt is counted: the dedup step treats it as it
// treats its database away (the batch is requeued, the pool waits).
type UnavailableError struct {
	// Handler is the handler's name.
	Handler string
	// Err is why.
	Err error
}

// Error returns "remote handler NAME unavailable: ...".
func (e *UnavailableError) Error() string {
	return "remote handler " + e.Handler + " unavailable: " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *UnavailableError) Unwrap() error { return e.Err }

// HandlerUnavailable reports true: the dedup step requeues the batch.
func (e *UnavailableError) HandlerUnavailable() bool { return true }

// BadAnswerError is an answer not of the contract's shape: a status other
// than 200 (and those of UnavailableError), a body that is not the
// contract's JSON, or results not one-to-one with the call's events. The
// events are retried, attempts counted, one per call.
type BadAnswerError struct {
	// Handler is the handler's name.
	Handler string
	// Msg says what is wrong.
	Msg string
}

// Error returns "remote handler NAME: bad answer: ...".
func (e *BadAnswerError) Error() string {
	return "remote handler " + e.Handler + ": bad answer: " + e.Msg
}

func (h *Handler) badAnswer(format string, args ...any) error {
	return &BadAnswerError{Handler: h.name, Msg: fmt.Sprintf(format, args...)}
}

// call POSTs evs and returns one answer per event, in order.
func (h *Handler) call(ctx context.Context, evs []consumer.Event) (answers []*answer, err error) {
	in := h.inst.Load()
	body := h.request(evs)
	cctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	var span trace.Span
	if in.tracer != nil {
		cctx, span = in.tracer.Start(cctx, "POST", trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("http.request.method", http.MethodPost), attribute.String("url.full", h.url),
				attribute.String("platformd.handler", h.name), attribute.Int("platformd.handler.events", len(evs))))
	}
	if l := h.lim; l != nil {
		if err := l.acquire(ctx); err != nil {
			return nil, fmt.Errorf("remote handler %s: waiting for a call slot: %w", h.name, err)
		}
	}
	h.testSignals.CallStarted.Signal(len(evs))
	start := time.Now()
	result := metrics.RemoteOK
	var status int
	var data []byte
	// Deferred first, so it runs last: the call counted, its slot freed
	// and the limit moved before a test sees the end.
	defer func() { h.testSignals.CallEnded.Signal(result) }()
	defer func() {
		recordExchange(ctx, Exchange{Handler: h.name, URL: h.url, Request: body, Status: status, Answer: data,
			Duration: time.Since(start), Err: err})
	}()
	if l := h.lim; l != nil {
		// Latency per event: a call's time grows with its batch.
		defer func() {
			l.release(result == metrics.RemoteUnavailable || result == metrics.RemoteTimeout, start,
				time.Since(start)/time.Duration(max(len(evs), 1)), result != "")
		}()
	}
	defer func() {
		in.observe(result, time.Since(start))
		if span != nil {
			if err != nil {
				span.SetStatus(codes.Error, err.Error())
			}
			span.SetAttributes(attribute.String("platformd.remote.result", cmp.Or(result, "cancelled")))
			span.End()
		}
	}()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("remote handler %s: %w", h.name, err)
	}
	req.Header = h.headers.Clone()
	propagation.TraceContext{}.Inject(cctx, propagation.HeaderCarrier(req.Header))
	resp, err := h.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			// The batch's own end (a stop): not the handler's doing, and
			// not counted.
			result = ""
			return nil, fmt.Errorf("remote handler %s: %w", h.name, ctx.Err())
		}
		result = metrics.RemoteUnavailable
		if errors.Is(err, context.DeadlineExceeded) {
			result = metrics.RemoteTimeout
			err = fmt.Errorf("no answer within %s: %w", h.timeout, err)
		}
		return nil, &UnavailableError{Handler: h.name, Err: err}
	}
	status = resp.StatusCode
	data, rerr := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes+1))
	// Read to EOF (bounded) before closing, so the connection is reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		result = metrics.RemoteUnavailable
		return nil, &UnavailableError{Handler: h.name, Err: fmt.Errorf("status %s", resp.Status)}
	}
	if rerr != nil {
		result = metrics.RemoteUnavailable
		if errors.Is(rerr, context.DeadlineExceeded) || cctx.Err() != nil {
			result = metrics.RemoteTimeout
		}
		if ctx.Err() != nil {
			result = ""
			return nil, fmt.Errorf("remote handler %s: %w", h.name, ctx.Err())
		}
		return nil, &UnavailableError{Handler: h.name, Err: fmt.Errorf("reading the answer: %w", rerr)}
	}
	result = metrics.RemoteBadAnswer
	if resp.StatusCode != http.StatusOK {
		return nil, h.badAnswer("status %s: %s", resp.Status, snippet(data))
	}
	if len(data) > MaxAnswerBytes {
		return nil, h.badAnswer("body larger than %d bytes", MaxAnswerBytes)
	}
	answers, err = h.decode(data, evs)
	if err != nil {
		return nil, err
	}
	result = metrics.RemoteOK
	return answers, nil
}

// observe counts a call and sets the up gauge; result "" (the batch's own
// end cut the call) counts nothing.
func (in *instruments) observe(result string, d time.Duration) {
	if in.calls == nil || result == "" {
		return
	}
	in.calls[result].Inc()
	in.duration.Observe(d.Seconds())
	if result == metrics.RemoteUnavailable || result == metrics.RemoteTimeout {
		in.up.Set(0)
	} else {
		in.up.Set(1)
	}
}

// snippet is the start of a body, for messages.
func snippet(b []byte) string {
	const n = 200
	if len(b) > n {
		return strconv.Quote(string(b[:n])) + "..."
	}
	return strconv.Quote(string(b))
}

// request encodes the call's body; each payload is spliced byte for byte.
func (h *Handler) request(evs []consumer.Event) []byte {
	size := 64
	for i := range evs {
		size += 256 + len(evs[i].Payload)
	}
	b := make([]byte, 0, size)
	b = append(b, `{"service":`...)
	b = appendString(b, h.service)
	b = append(b, `,"handler":`...)
	b = appendString(b, h.name)
	b = append(b, `,"events":[`...)
	for i := range evs {
		ev := &evs[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"event_id":"`...)
		b = append(b, ev.ID.String()...)
		b = append(b, `","event_name":`...)
		b = appendString(b, ev.Name)
		b = append(b, `,"occurred_at":"`...)
		b = ev.OccurredAt.AppendFormat(b, time.RFC3339Nano)
		b = append(b, `","payload":`...)
		b = append(b, ev.Payload...)
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, int64(ev.Attempt), 10)
		b = append(b, `,"routing_key":`...)
		b = appendString(b, ev.Delivery.RoutingKey)
		b = append(b, `,"replay":`...)
		b = strconv.AppendBool(b, ev.Delivery.Replay)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

// The answer's JSON. Numbers of args are kept as written (RawMessage).
type (
	answerJSON struct {
		Results *[]resultJSON `json:"results"`
	}
	resultJSON struct {
		EventID   string         `json:"event_id"`
		Effects   []effectJSON   `json:"effects"`
		Publish   []publishJSON  `json:"publish"`
		Error     jsontext.Value `json:"error"`
		Permanent bool           `json:"permanent"`
	}
	effectJSON struct {
		Statement string                    `json:"statement"`
		Args      map[string]jsontext.Value `json:"args"`
	}
	publishJSON struct {
		EventName string                    `json:"event_name"`
		Payload   jsontext.Value            `json:"payload"`
		Headers   map[string]jsontext.Value `json:"headers"`
	}
)

// decode checks an answer against the call's events and returns one
// answer per event, in the events' order.
func (h *Handler) decode(data []byte, evs []consumer.Event) ([]*answer, error) {
	// json v2: exact key names, duplicate keys refused, nothing after the
	// value, numbers kept as written (jsontext.Value), faster than v1.
	var a answerJSON
	if err := jsonv2.Unmarshal(data, &a); err != nil {
		return nil, h.badAnswer("not the contract's JSON: %v: %s", err, snippet(data))
	}
	if a.Results == nil {
		return nil, h.badAnswer(`no "results" array`)
	}
	index := make(map[uuid.UUID]int, len(evs))
	for i := range evs {
		index[evs[i].ID] = i
	}
	out := make([]*answer, len(evs))
	for k, r := range *a.Results {
		id, err := uuid.Parse(r.EventID)
		if err != nil {
			return nil, h.badAnswer("results[%d]: event_id %q is not a UUID", k, r.EventID)
		}
		i, ok := index[id]
		switch {
		case !ok:
			return nil, h.badAnswer("results[%d]: event %s was not in the call", k, id)
		case out[i] != nil:
			return nil, h.badAnswer("results[%d]: a second result for event %s", k, id)
		}
		ans, err := h.result(r)
		if err != nil {
			return nil, h.badAnswer("results[%d] (event %s): %v", k, id, err)
		}
		out[i] = ans
	}
	for i := range evs {
		if out[i] == nil {
			return nil, h.badAnswer("no result for event %s", evs[i].ID)
		}
	}
	return out, nil
}
