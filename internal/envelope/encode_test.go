package envelope

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func goodEnvelope() Envelope {
	return Envelope{
		EventID:    uuid.MustParse(idV7),
		EventName:  idName,
		OccurredAt: time.Date(2024, 5, 1, 10, 0, 0, 123456789, time.FixedZone("CEST", 2*3600)),
		Payload:    json.RawMessage(goodPayload),
	}
}

func TestEncode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mod  func(e *Envelope)
		want string
	}{
		{
			name: "typical",
			mod:  func(*Envelope) {},
			want: `{"event_id":"` + idV7 + `","event_name":"` + idName + `","occurred_at":"2024-05-01T10:00:00.123456789+02:00","payload":` + goodPayload + `}`,
		},
		{
			name: "UTC is written as Z, no fraction",
			mod:  func(e *Envelope) { e.OccurredAt = time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC) },
			want: `{"event_id":"` + idV7 + `","event_name":"` + idName + `","occurred_at":"2024-05-01T10:00:00Z","payload":` + goodPayload + `}`,
		},
		{
			name: "negative offset, trailing zeros trimmed",
			mod: func(e *Envelope) {
				e.OccurredAt = time.Date(2024, 5, 1, 10, 0, 0, 500000000, time.FixedZone("", -(9*3600+30*60)))
			},
			want: `{"event_id":"` + idV7 + `","event_name":"` + idName + `","occurred_at":"2024-05-01T10:00:00.5-09:30","payload":` + goodPayload + `}`,
		},
		{
			name: "event name with quote and backslash, payload kept verbatim",
			mod: func(e *Envelope) {
				e.EventName = `a"b\c.é`
				e.Payload = json.RawMessage(`{ "a" : [ 1 , "\u00e9" ] }`)
			},
			want: `{"event_id":"` + idV7 + `","event_name":"a\"b\\c.é","occurred_at":"2024-05-01T10:00:00.123456789+02:00","payload":{ "a" : [ 1 , "\u00e9" ] }}`,
		},
		{
			name: "upper-case id is written lower-case",
			mod:  func(e *Envelope) { e.EventID = uuid.MustParse(strings.ToUpper(idV4)) },
			want: `{"event_id":"` + idV4 + `","event_name":"` + idName + `","occurred_at":"2024-05-01T10:00:00.123456789+02:00","payload":` + goodPayload + `}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := goodEnvelope()
			tc.mod(&e)
			out, err := Encode(e)
			require.NoError(t, err)
			require.Equal(t, tc.want, string(out))
			require.True(t, json.Valid(out))
			back, err := Decode(out, 0)
			require.NoError(t, err)
			requireSameEnvelope(t, e, back)
		})
	}

	t.Run("time with a monotonic reading", func(t *testing.T) {
		t.Parallel()
		e := goodEnvelope()
		e.OccurredAt = time.Now()
		out, err := Encode(e)
		require.NoError(t, err)
		back, err := Decode(out, 0)
		require.NoError(t, err)
		requireSameEnvelope(t, e, back)
	})
}

func TestEncodeRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mod    func(e *Envelope)
		field  string
		reason string
	}{
		{"nil id", func(e *Envelope) { e.EventID = uuid.Nil }, FieldEventID, "nil UUID"},
		{"max id", func(e *Envelope) { e.EventID = uuid.Max }, FieldEventID, "max UUID"},
		{"version 0 id", func(e *Envelope) { e.EventID[6] &= 0x0f }, FieldEventID, "version"},
		{"version 9 id", func(e *Envelope) { e.EventID[6] = 0x90 | e.EventID[6]&0x0f }, FieldEventID, "version"},
		{"NCS variant id", func(e *Envelope) { e.EventID[8] &= 0x3f }, FieldEventID, "variant"},
		{"empty name", func(e *Envelope) { e.EventName = "" }, FieldEventName, "must not be empty"},
		{"long name", func(e *Envelope) { e.EventName = strings.Repeat("x", 256) }, FieldEventName, "at most 255"},
		{"name with space", func(e *Envelope) { e.EventName = "a b" }, FieldEventName, "whitespace"},
		{"name with NUL", func(e *Envelope) { e.EventName = "a\x00b" }, FieldEventName, "control"},
		{"name with C1 control", func(e *Envelope) { e.EventName = "a\u0085b" }, FieldEventName, "control"},
		{"name with invalid UTF-8", func(e *Envelope) { e.EventName = "a\xffb" }, FieldEventName, "invalid UTF-8"},
		{"year 10000", func(e *Envelope) { e.OccurredAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, FieldOccurredAt, "not representable"},
		{"negative year", func(e *Envelope) { e.OccurredAt = time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC) }, FieldOccurredAt, "not representable"},
		{"offset with seconds", func(e *Envelope) {
			e.OccurredAt = time.Date(2024, 1, 1, 0, 0, 0, 0, time.FixedZone("LMT", 17*60+30))
		}, FieldOccurredAt, "not representable"},
		{"offset of 24 hours", func(e *Envelope) {
			e.OccurredAt = time.Date(2024, 1, 1, 0, 0, 0, 0, time.FixedZone("", 24*3600))
		}, FieldOccurredAt, "not representable"},
		{"nil payload", func(e *Envelope) { e.Payload = nil }, FieldPayload, "required"},
		{"empty payload", func(e *Envelope) { e.Payload = json.RawMessage{} }, FieldPayload, "required"},
		{"array payload", func(e *Envelope) { e.Payload = json.RawMessage(`[]`) }, FieldPayload, "must be a JSON object, got an array"},
		{"null payload", func(e *Envelope) { e.Payload = json.RawMessage(`null`) }, FieldPayload, "got null"},
		{"leading whitespace", func(e *Envelope) { e.Payload = json.RawMessage(` {}`) }, FieldPayload, "leading whitespace"},
		{"trailing whitespace", func(e *Envelope) { e.Payload = json.RawMessage(`{} `) }, FieldPayload, "unexpected data after"},
		{"trailing data", func(e *Envelope) { e.Payload = json.RawMessage(`{}{}`) }, FieldPayload, "unexpected data after"},
		{"truncated", func(e *Envelope) { e.Payload = json.RawMessage(`{"a":`) }, FieldPayload, "unexpected end of input"},
		{"duplicate key", func(e *Envelope) { e.Payload = json.RawMessage(`{"a":{"b":1,"b":2}}`) }, "b", "duplicate key in payload"},
		{"NUL escape", func(e *Envelope) { e.Payload = json.RawMessage(`{"a":"\u0000"}`) }, FieldPayload, `\u0000`},
		{"invalid UTF-8", func(e *Envelope) { e.Payload = json.RawMessage("{\"a\":\"\xff\"}") }, FieldPayload, "invalid UTF-8"},
		{"lone surrogate", func(e *Envelope) { e.Payload = json.RawMessage(`{"a":"\udfff"}`) }, FieldPayload, "surrogate"},
		{"too deep", func(e *Envelope) { e.Payload = json.RawMessage(nestObj(MaxDepth, "1")) }, FieldPayload, "nesting deeper"},
		{"too large", func(e *Envelope) {
			e.Payload = json.RawMessage(`{"a":"` + strings.Repeat("x", DefaultMaxBodyBytes) + `"}`)
		}, FieldBody, "exceeds the limit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := goodEnvelope()
			tc.mod(&e)
			out, err := Encode(e)
			requireFieldError(t, err, tc.field, tc.reason)
			require.Nil(t, out)
		})
	}

	t.Run("too large wraps ErrTooLarge", func(t *testing.T) {
		t.Parallel()
		e := goodEnvelope()
		e.Payload = json.RawMessage(`{"a":"` + strings.Repeat("x", DefaultMaxBodyBytes) + `"}`)
		_, err := Encode(e)
		require.ErrorIs(t, err, ErrTooLarge)
	})
}

// randomJSON writes a random JSON value of at most depth more levels; keys of
// one object are distinct by construction.
func randomJSON(r *rand.Rand, b *strings.Builder, depth int) {
	kind := r.IntN(8)
	if depth <= 0 && kind >= 6 {
		kind = r.IntN(6)
	}
	switch kind {
	case 0:
		b.WriteString([]string{"true", "false", "null"}[r.IntN(3)])
	case 1:
		b.WriteString(strconv.FormatInt(r.Int64()-r.Int64(), 10))
	case 2:
		b.WriteString("123456789012345678901234567890" + strconv.Itoa(r.IntN(1000)))
	case 3:
		b.WriteString(strconv.FormatFloat(r.NormFloat64()*1e10, 'g', -1, 64))
	case 4, 5:
		b.WriteString(randomString(r))
	case 6:
		b.WriteString("[")
		for i := range r.IntN(4) {
			if i > 0 {
				b.WriteString(",")
			}
			randomJSON(r, b, depth-1)
		}
		b.WriteString("]")
	default:
		randomObject(r, b, depth-1)
	}
}

func randomObject(r *rand.Rand, b *strings.Builder, depth int) {
	b.WriteString("{")
	for i := range r.IntN(5) {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(b, `"k%d%s":`, i, []string{"", "é", `\u00e9`, `\ud83d\ude00`, `\n`}[r.IntN(5)])
		randomJSON(r, b, depth)
	}
	b.WriteString("}")
}

func randomString(r *rand.Rand) string {
	pieces := []string{"a", "Z", "é", "中", "😀", `\"`, `\\`, `\/`, `\n`, `\t`, `\u00e9`, `\uD83D\uDE00`, `\u0001`, " "}
	var b strings.Builder
	b.WriteString(`"`)
	for range r.IntN(6) {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	b.WriteString(`"`)
	return b.String()
}

// TestEncodeDecodeRoundTrip checks the Encode/Decode property on random
// envelopes.
func TestEncodeDecodeRoundTrip(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	nameRunes := []rune("abcxyzABC.-_:/0189é中😀\"\\")
	minSec := time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC).Unix() + 86400
	maxSec := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC).Unix()
	for i := range 5000 {
		var e Envelope
		if i%2 == 0 {
			e.EventID = uuid.Must(uuid.NewV7())
		} else {
			e.EventID = uuid.New()
		}
		var name strings.Builder
		for range 1 + r.IntN(40) {
			name.WriteRune(nameRunes[r.IntN(len(nameRunes))])
		}
		e.EventName = name.String()
		off := (r.IntN(2*24*60-1) - (24*60 - 1)) * 60
		loc := time.UTC
		if off != 0 || r.IntN(2) == 0 {
			loc = time.FixedZone("Z"+strconv.Itoa(off), off)
		}
		e.OccurredAt = time.Unix(minSec+r.Int64N(maxSec-minSec), int64(r.IntN(1e9))).In(loc)
		if r.IntN(4) == 0 {
			e.OccurredAt = e.OccurredAt.Truncate(time.Second)
		}
		var p strings.Builder
		randomObject(r, &p, 5)
		e.Payload = json.RawMessage(p.String())

		out, err := Encode(e)
		require.NoError(t, err, "envelope %+v", e)
		back, err := Decode(out, 0)
		require.NoError(t, err, "body %s", out)
		requireSameEnvelope(t, e, back)
		out2, err := Encode(back)
		require.NoError(t, err)
		require.Equal(t, string(out), string(out2))
	}
}
