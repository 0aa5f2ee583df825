package envelope

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const (
	idV7   = "0190a5d1-6f5e-7c3a-9b2d-3e4f5a6b7c8d"
	idV4   = "f47ac10b-58cc-4372-a567-0e02b2c3d479"
	idName = "order.order.placed.v1"
	idAt   = "2024-05-01T10:00:00.123456789+02:00"
	// goodPayload is a typical payload.
	goodPayload = `{"order_id":"A-1001","customer":{"id":42,"email":"a@example.com"},"amount":{"value":"19.99","currency":"EUR"},"items":[{"sku":"X-1","qty":2},{"sku":"Y-2","qty":1}],"gift":false,"note":null}`
)

// q wraps s in quotes without escaping, so tests can embed raw escapes.
func q(s string) string { return `"` + s + `"` }

// parts holds the four top-level values as raw JSON text.
type parts struct{ id, name, at, payload string }

func good() parts { return parts{q(idV7), q(idName), q(idAt), goodPayload} }

func (p parts) body() string {
	return `{"event_id":` + p.id + `,"event_name":` + p.name + `,"occurred_at":` + p.at + `,"payload":` + p.payload + `}`
}

func withID(v string) string      { p := good(); p.id = v; return p.body() }
func withName(v string) string    { p := good(); p.name = v; return p.body() }
func withAt(v string) string      { p := good(); p.at = v; return p.body() }
func withPayload(v string) string { p := good(); p.payload = v; return p.body() }

// nest returns depth nested arrays around inner.
func nest(depth int, inner string) string {
	return strings.Repeat("[", depth) + inner + strings.Repeat("]", depth)
}

// nestObj returns depth nested objects {"a":...} around inner.
func nestObj(depth int, inner string) string {
	return strings.Repeat(`{"a":`, depth) + inner + strings.Repeat("}", depth)
}

// requireFieldError asserts that err is a *FieldError on field whose
// reason contains reason (if not empty).
func requireFieldError(t *testing.T, err error, field, reason string) {
	t.Helper()
	var fe *FieldError
	require.ErrorAs(t, err, &fe, "error %T %v is not a *FieldError", err, err)
	require.Equal(t, field, fe.Field, "error: %v", err)
	if reason != "" {
		require.Contains(t, fe.Reason, reason, "error: %v", err)
	}
}

// requireSameEnvelope asserts a and b are equal as the codec defines it.
func requireSameEnvelope(t testing.TB, a, b Envelope) {
	t.Helper()
	require.Equal(t, a.EventID, b.EventID)
	require.Equal(t, a.EventName, b.EventName)
	require.Equal(t, string(a.Payload), string(b.Payload))
	require.True(t, a.OccurredAt.Equal(b.OccurredAt), "%v != %v", a.OccurredAt, b.OccurredAt)
	_, ao := a.OccurredAt.Zone()
	_, bo := b.OccurredAt.Zone()
	require.Equal(t, ao, bo, "zone offsets differ: %v vs %v", a.OccurredAt, b.OccurredAt)
}
