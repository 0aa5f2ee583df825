package consumer

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMessageEncode(t *testing.T) {
	t.Parallel()
	p, h, err := Message{Name: "stock.stock.reserved.v1", Payload: map[string]int{"n": 1}}.encode()
	require.NoError(t, err)
	require.JSONEq(t, `{"n":1}`, string(p))
	require.Equal(t, "{}", string(h))

	p, h, err = Message{Name: "a_b-c.D9", Payload: json.RawMessage(` {"big": 123456789012345678901234567890} `),
		Headers: map[string]any{"traceparent": "00-x", "n": 2}}.encode()
	require.NoError(t, err)
	require.Contains(t, string(p), "123456789012345678901234567890", "raw payloads are passed through")
	require.JSONEq(t, `{"traceparent":"00-x","n":2}`, string(h))

	for _, bad := range []Message{
		{Name: "", Payload: []byte(`{}`)},
		{Name: "has space", Payload: []byte(`{}`)},
		{Name: "a..b", Payload: []byte(`{}`)},
		{Name: ".a", Payload: []byte(`{}`)},
		{Name: "a.*", Payload: []byte(`{}`)},
		{Name: strings.Repeat("a", MaxMessageNameBytes+1), Payload: []byte(`{}`)},
		{Name: "a.b"},
		{Name: "a.b", Payload: []byte(`[1]`)},
		{Name: "a.b", Payload: json.RawMessage(`{"a":`)},
		{Name: "a.b", Payload: "a string"},
		{Name: "a.b", Payload: math.Inf(1)},
		{Name: "a.b", Payload: []byte(`{}`), Headers: map[string]any{"f": func() {}}},
		{Name: "a.b", Payload: []byte(`{}`), Headers: map[string]any{"big": strings.Repeat("x", MaxHeadersBytes)}},
	} {
		_, _, err := bad.encode()
		require.ErrorIs(t, err, ErrInvalidMessage, "%+v", bad.Name)
	}
	_, _, err = Message{Name: strings.Repeat("a", MaxMessageNameBytes), Payload: []byte(`{}`)}.encode()
	require.NoError(t, err)
}

func TestPublishRefusesBadInputBeforeTheDatabase(t *testing.T) {
	t.Parallel()
	_, err := Publish(context.Background(), nil, Message{Name: "a.b", Payload: []byte(`{}`)})
	require.Error(t, err)
}

// Publish's statement is named in pg_stat_activity as internal/query names
// platformd's queries: "/* platformd:<owner>.<what> */ " first.
func TestPublishStatementIsNamed(t *testing.T) {
	t.Parallel()
	require.True(t, strings.HasPrefix(insertOutboxSQL, "/* platformd:consumer.publish */ INSERT INTO platform.outbox "), insertOutboxSQL)
}
