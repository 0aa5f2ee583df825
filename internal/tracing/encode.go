package tracing

import (
	"encoding/binary"
	"math"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of the OTLP messages (opentelemetry/proto, trace/v1,
// common/v1, resource/v1) that encode writes.
const (
	fResourceSpansResource   = 1
	fResourceSpansScopeSpans = 2
	fResourceSpansSchemaURL  = 3

	fResourceAttributes = 1

	fScopeSpansScope     = 1
	fScopeSpansSpans     = 2
	fScopeSpansSchemaURL = 3

	fScopeName       = 1
	fScopeVersion    = 2
	fScopeAttributes = 3

	fSpanTraceID       = 1
	fSpanSpanID        = 2
	fSpanTraceState    = 3
	fSpanParentSpanID  = 4
	fSpanName          = 5
	fSpanKind          = 6
	fSpanStart         = 7
	fSpanEnd           = 8
	fSpanAttributes    = 9
	fSpanDroppedAttrs  = 10
	fSpanEvents        = 11
	fSpanDroppedEvents = 12
	fSpanLinks         = 13
	fSpanDroppedLinks  = 14
	fSpanStatus        = 15
	fSpanFlags         = 16

	fEventTime         = 1
	fEventName         = 2
	fEventAttributes   = 3
	fEventDroppedAttrs = 4

	fLinkTraceID      = 1
	fLinkSpanID       = 2
	fLinkAttributes   = 4
	fLinkDroppedAttrs = 5
	fLinkFlags        = 6

	fStatusMessage = 2
	fStatusCode    = 3

	fKeyValueKey   = 1
	fKeyValueValue = 2

	fAnyString = 1
	fAnyBool   = 2
	fAnyInt    = 3
	fAnyDouble = 4
	fAnyArray  = 5
	fAnyKVList = 6
	fAnyBytes  = 7

	fArrayValues  = 1
	fKVListValues = 1
)

// OTLP's span flags beyond the W3C trace flags (SpanFlags).
const (
	flagHasIsRemote = 0x100
	flagIsRemote    = 0x200
)

// OTLP's status codes (Status.StatusCode), which number Ok and Error the
// other way round from the API's codes.
const (
	statusOK    = 1
	statusError = 2
)

// group is the spans of one resource and instrumentation scope, in the
// order they ended.
type group struct {
	res   *resource.Resource
	key   attribute.Distinct
	scope instrumentation.Scope
	spans []sdktrace.ReadOnlySpan
}

// encoder turns the SDK's ended spans into OTLP protobuf bytes directly,
// where the OTLP exporter builds a tree of generated messages per span (an
// allocation per attribute, three per value) and then marshals it: that
// was half of a traced delivery's CPU. Its output is what the exporter's
// transform and proto.Marshal give, field for field (TestEncodeMatches
// Exporter). An encoder is not safe for concurrent use; its buffers are
// reused from one export to the next.
type encoder struct {
	groups []group // in the order of their first span
	buf    []byte  // the encoded ResourceSpans, one after another
}

// encode encodes spans as the fields of one ResourceSpans per resource (its
// message body, without tag or length) and returns them, valid until the
// next call.
func (e *encoder) encode(spans []sdktrace.ReadOnlySpan) [][]byte {
	e.group(spans)
	b := e.buf[:0]
	var out [][]byte
	for i := range e.groups {
		key, r := e.groups[i].key, e.groups[i].res
		if slices.ContainsFunc(e.groups[:i], func(g group) bool { return g.key == key }) {
			continue // encoded with its resource's first group
		}
		start := len(b)
		if r != nil {
			m := beginMessage(&b, fResourceSpansResource)
			b = appendIter(b, fResourceAttributes, r.Iter())
			endMessage(&b, m)
		}
		for j := i; j < len(e.groups); j++ {
			if e.groups[j].key == key {
				b = appendScopeSpans(b, &e.groups[j])
			}
		}
		if r != nil && r.SchemaURL() != "" {
			b = protowire.AppendString(protowire.AppendTag(b, fResourceSpansSchemaURL, protowire.BytesType), r.SchemaURL())
		}
		// A slice of b as it is now: later appends may move b, never
		// these bytes.
		out = append(out, b[start:len(b):len(b)])
	}
	e.buf = b
	for i := range e.groups {
		clear(e.groups[i].spans) // the spans are the SDK's to free
	}
	return out
}

// group sorts spans into e.groups by resource and scope. A daemon has one
// resource and one scope: a linear search is the cheapest. A group's span
// slice is kept from one export to the next.
func (e *encoder) group(spans []sdktrace.ReadOnlySpan) {
	e.groups = e.groups[:0]
	for _, s := range spans {
		if s == nil {
			continue
		}
		r := s.Resource()
		key, scope := r.Equivalent(), s.InstrumentationScope()
		i := slices.IndexFunc(e.groups, func(g group) bool { return g.key == key && g.scope == scope })
		if i < 0 {
			i = len(e.groups)
			e.groups = slices.Grow(e.groups, 1)[:i+1]
			g := &e.groups[i]
			g.res, g.key, g.scope, g.spans = r, key, scope, g.spans[:0]
		}
		e.groups[i].spans = append(e.groups[i].spans, s)
	}
}

func appendScopeSpans(b []byte, g *group) []byte {
	m := beginMessage(&b, fResourceSpansScopeSpans)
	if g.scope != (instrumentation.Scope{}) {
		s := beginMessage(&b, fScopeSpansScope)
		b = appendString(b, fScopeName, g.scope.Name)
		b = appendString(b, fScopeVersion, g.scope.Version)
		b = appendIter(b, fScopeAttributes, g.scope.Attributes.Iter())
		endMessage(&b, s)
	}
	for _, s := range g.spans {
		b = appendSpan(b, s)
	}
	b = appendString(b, fScopeSpansSchemaURL, g.scope.SchemaURL)
	endMessage(&b, m)
	return b
}

func appendSpan(b []byte, s sdktrace.ReadOnlySpan) []byte {
	m := beginMessage(&b, fScopeSpansSpans)
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = appendBytes(b, fSpanTraceID, tid[:])
	b = appendBytes(b, fSpanSpanID, sid[:])
	if ts := sc.TraceState(); ts.Len() > 0 {
		b = appendString(b, fSpanTraceState, ts.String())
	}
	parent := s.Parent()
	if psid := parent.SpanID(); psid.IsValid() {
		b = appendBytes(b, fSpanParentSpanID, psid[:])
	}
	b = appendString(b, fSpanName, s.Name())
	if k := spanKind(s.SpanKind()); k != 0 {
		b = protowire.AppendVarint(protowire.AppendTag(b, fSpanKind, protowire.VarintType), k)
	}
	b = appendTime(b, fSpanStart, s.StartTime().UnixNano())
	b = appendTime(b, fSpanEnd, s.EndTime().UnixNano())
	if d, ok := s.(*Span); ok {
		b = d.appendAttributes(b)
	} else {
		b = appendKeyValues(b, fSpanAttributes, s.Attributes())
	}
	b = appendCount(b, fSpanDroppedAttrs, s.DroppedAttributes())
	for _, ev := range s.Events() {
		em := beginMessage(&b, fSpanEvents)
		b = appendTime(b, fEventTime, ev.Time.UnixNano())
		b = appendString(b, fEventName, ev.Name)
		b = appendKeyValues(b, fEventAttributes, ev.Attributes)
		b = appendCount(b, fEventDroppedAttrs, ev.DroppedAttributeCount)
		endMessage(&b, em)
	}
	b = appendCount(b, fSpanDroppedEvents, s.DroppedEvents())
	for _, l := range s.Links() {
		lm := beginMessage(&b, fSpanLinks)
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		b = appendBytes(b, fLinkTraceID, ltid[:])
		b = appendBytes(b, fLinkSpanID, lsid[:])
		b = appendKeyValues(b, fLinkAttributes, l.Attributes)
		b = appendCount(b, fLinkDroppedAttrs, l.DroppedAttributeCount)
		b = appendFixed32(b, fLinkFlags, spanFlags(l.SpanContext.TraceFlags(), l.SpanContext))
		endMessage(&b, lm)
	}
	b = appendCount(b, fSpanDroppedLinks, s.DroppedLinks())
	st := beginMessage(&b, fSpanStatus)
	status := s.Status()
	b = appendString(b, fStatusMessage, status.Description)
	switch status.Code {
	case codes.Ok:
		b = protowire.AppendVarint(protowire.AppendTag(b, fStatusCode, protowire.VarintType), statusOK)
	case codes.Error:
		b = protowire.AppendVarint(protowire.AppendTag(b, fStatusCode, protowire.VarintType), statusError)
	}
	endMessage(&b, st)
	b = appendFixed32(b, fSpanFlags, spanFlags(sc.TraceFlags(), parent))
	endMessage(&b, m)
	return b
}

// spanFlags are the W3C trace flags and whether the parent (or a link's
// context) is remote, as the OTLP exporter writes them.
func spanFlags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | flagHasIsRemote
	if parent.IsRemote() {
		f |= flagIsRemote
	}
	return f
}

func spanKind(k trace.SpanKind) uint64 {
	switch k {
	case trace.SpanKindInternal, trace.SpanKindServer, trace.SpanKindClient, trace.SpanKindProducer, trace.SpanKindConsumer:
		return uint64(k) // OTLP numbers the kinds as the API does
	}
	return 0
}

func appendIter(b []byte, field protowire.Number, it attribute.Iterator) []byte {
	for it.Next() {
		b = appendKeyValue(b, field, it.Attribute())
	}
	return b
}

// appendKeyValues writes kvs as repeated KeyValue fields.
func appendKeyValues(b []byte, field protowire.Number, kvs []attribute.KeyValue) []byte {
	for _, kv := range kvs {
		b = appendKeyValue(b, field, kv)
	}
	return b
}

func appendKeyValue(b []byte, field protowire.Number, kv attribute.KeyValue) []byte {
	m := beginMessage(&b, field)
	b = appendString(b, fKeyValueKey, string(kv.Key))
	b = appendAnyValue(b, fKeyValueValue, kv.Value)
	endMessage(&b, m)
	return b
}

// appendAnyValue writes v as an AnyValue. Its oneof field is written even
// when zero (a oneof has presence), and an empty value is an empty
// message, as the exporter writes them.
func appendAnyValue(b []byte, field protowire.Number, v attribute.Value) []byte {
	m := beginMessage(&b, field)
	switch v.Type() {
	case attribute.BOOL:
		b = protowire.AppendVarint(protowire.AppendTag(b, fAnyBool, protowire.VarintType), protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		b = protowire.AppendVarint(protowire.AppendTag(b, fAnyInt, protowire.VarintType), uint64(v.AsInt64())) //nolint:gosec // two's complement, as protobuf's int64
	case attribute.FLOAT64:
		b = protowire.AppendFixed64(protowire.AppendTag(b, fAnyDouble, protowire.Fixed64Type), math.Float64bits(v.AsFloat64()))
	case attribute.STRING:
		b = protowire.AppendString(protowire.AppendTag(b, fAnyString, protowire.BytesType), v.AsString())
	case attribute.BYTESLICE:
		b = protowire.AppendBytes(protowire.AppendTag(b, fAnyBytes, protowire.BytesType), v.AsByteSlice())
	case attribute.BOOLSLICE:
		b = appendArray(b, v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		b = appendArray(b, v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		b = appendArray(b, v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		b = appendArray(b, v.AsStringSlice(), attribute.StringValue)
	case attribute.SLICE:
		b = appendArray(b, v.AsSlice(), func(x attribute.Value) attribute.Value { return x })
	case attribute.MAP:
		a := beginMessage(&b, fAnyKVList)
		for _, kv := range v.AsMap() {
			b = appendKeyValue(b, fKVListValues, kv)
		}
		endMessage(&b, a)
	case attribute.EMPTY:
	default:
		b = protowire.AppendString(protowire.AppendTag(b, fAnyString, protowire.BytesType), "INVALID")
	}
	endMessage(&b, m)
	return b
}

// appendArray writes xs as an AnyValue's array_value, each element as
// value makes it.
func appendArray[T any](b []byte, xs []T, value func(T) attribute.Value) []byte {
	a := beginMessage(&b, fAnyArray)
	for _, x := range xs {
		b = appendAnyValue(b, fArrayValues, value(x))
	}
	endMessage(&b, a)
	return b
}

// appendString writes a string field unless it is empty (proto3's default).
func appendString(b []byte, field protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return protowire.AppendString(protowire.AppendTag(b, field, protowire.BytesType), s)
}

func appendBytes(b []byte, field protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, field, protowire.BytesType), v)
}

// appendTime writes a time in Unix nanoseconds, none before 1970 (as the
// exporter does) and none at all when zero.
func appendTime(b []byte, field protowire.Number, ns int64) []byte {
	if ns <= 0 {
		return b
	}
	return protowire.AppendFixed64(protowire.AppendTag(b, field, protowire.Fixed64Type), uint64(ns))
}

func appendFixed32(b []byte, field protowire.Number, v uint32) []byte {
	return protowire.AppendFixed32(protowire.AppendTag(b, field, protowire.Fixed32Type), v)
}

// appendCount writes a dropped-items count, clamped to uint32, unless zero.
func appendCount(b []byte, field protowire.Number, n int) []byte {
	if n <= 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, field, protowire.VarintType), uint64(min(int64(n), math.MaxUint32)))
}

// beginMessage writes the tag of a length-delimited field and a one-byte
// placeholder for its length, and returns where the message's body starts:
// most bodies are shorter than 128 bytes, so endMessage rarely has to move
// one to make room for a longer length.
func beginMessage(b *[]byte, field protowire.Number) int {
	*b = protowire.AppendTag(*b, field, protowire.BytesType)
	*b = append(*b, 0)
	return len(*b)
}

// endMessage writes the length of the message whose body began at start.
func endMessage(b *[]byte, start int) {
	n := len(*b) - start
	if n < 0x80 {
		(*b)[start-1] = byte(n)
		return
	}
	size := protowire.SizeVarint(uint64(n))
	var room [binary.MaxVarintLen64]byte
	*b = append(*b, room[:size-1]...)
	copy((*b)[start+size-1:], (*b)[start:start+n])
	protowire.AppendVarint((*b)[start-1:start-1], uint64(n))
}
