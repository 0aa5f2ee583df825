package envelope

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// decoders are the implementations of the envelope contract that every
// decode test runs against: Decode, and decodeJSONv2, the same contract
// rebuilt on encoding/json/v2 for the head-to-head benchmark.
var decoders = []struct {
	name   string
	decode func(body []byte, maxBytes int) (Envelope, error)
}{
	{"scanner", Decode},
	{"jsonv2", decodeJSONv2},
}

func TestDecodeValid(t *testing.T) {
	t.Parallel()
	plus2 := time.FixedZone("", 2*3600)
	wantAt := time.Date(2024, 5, 1, 10, 0, 0, 123456789, plus2)

	var manyKeys strings.Builder
	manyKeys.WriteString("{")
	for i := range 200 {
		if i > 0 {
			manyKeys.WriteString(",")
		}
		fmt.Fprintf(&manyKeys, `"k%d":{"a":%d,"b":[{"a":1},{"a":2}]}`, i, i)
	}
	manyKeys.WriteString("}")

	tests := []struct {
		name        string
		body        string
		wantID      string // default idV7
		wantName    string // default idName
		wantAt      time.Time
		wantPayload string // default: the payload text as given
	}{
		{name: "v7", body: good().body()},
		{name: "v4", body: withID(q(idV4)), wantID: idV4},
		{name: "v1", body: withID(q("c232ab00-9414-11ec-b3c8-9f6bdeced846")), wantID: "c232ab00-9414-11ec-b3c8-9f6bdeced846"},
		{name: "v8", body: withID(q("2489e9ad-2ee2-8e00-8ec9-32d5f69181c0")), wantID: "2489e9ad-2ee2-8e00-8ec9-32d5f69181c0"},
		{name: "uppercase hex", body: withID(q(strings.ToUpper(idV7))), wantID: idV7},
		{name: "mixed case hex", body: withID(q("0190A5D1-6f5e-7C3A-9b2d-3E4F5A6B7C8D")), wantID: idV7},
		{name: "escaped uuid characters", body: withID(q(`\u0030190a5d1-6f5e-7c3a-9b2d-3e4f5a6b7c8d`)), wantID: idV7},
		{name: "keys in another order", body: `{"payload":{"x":1},"occurred_at":"` + idAt + `","event_name":"` + idName + `","event_id":"` + idV7 + `"}`, wantPayload: `{"x":1}`},
		{name: "whitespace everywhere", body: " \t\r\n{ \"event_id\" : \"" + idV7 + "\" ,\n\"event_name\"\t:\"" + idName + "\",\r\n \"occurred_at\": \"" + idAt + "\", \"payload\" : { \"a\" : [ 1 , 2 ] } }\n\n", wantPayload: `{ "a" : [ 1 , 2 ] }`},
		{name: "escaped top-level key", body: `{"event\u005fid":"` + idV7 + `","event_name":"` + idName + `","occurred_at":"` + idAt + `","payload":{}}`, wantPayload: `{}`},
		{name: "empty payload", body: withPayload(`{}`)},
		{name: "nested payload", body: withPayload(`{"a":{"b":{"c":[1,{"d":[true,false,null]}]}},"e":[[],[[]],{}]}`)},
		{name: "same key in different objects", body: withPayload(`{"a":{"a":1},"b":[{"a":1},{"a":2}],"c":{"a":{"a":{}}}}`)},
		{name: "object with many keys", body: withPayload(manyKeys.String())},
		{name: "big integers and exotic numbers", body: withPayload(`{"big":123456789012345678901234567890123,"neg":-98765432109876543210,"f":1.5e+300,"z":-0.0,"e":1E-7,"zero":0}`)},
		{name: "unicode escapes", body: withPayload(`{"caf\u00e9":"\u00e9\u00E9\u4e2d","esc":"\"\\\/\b\f\n\r\t"}`)},
		{name: "surrogate pair escape", body: withPayload(`{"emoji":"\ud83d\ude00","max":"\udbff\udfff"}`)},
		{name: "raw UTF-8", body: withPayload(`{"ключ":"é中😀","bom":"` + "\ufeff" + `","replacement":"` + "\ufffd" + `"}`)},
		{name: "escaped backslashes before u0000 are no NUL", body: withPayload(`{"a":"\\u0000","b":"\\\\\\u0000"}`)},
		{name: "raw DEL is not a JSON control character", body: withPayload("{\"del\":\"\x7f\"}")},
		{name: "unicode event name via escape", body: withName(q(`caf\u00e9.placed.v1`)), wantName: "café.placed.v1"},
		{name: "event name with quote and backslash", body: withName(q(`a\"b\\c`)), wantName: `a"b\c`},
		{name: "event name 255 bytes", body: withName(q(strings.Repeat("a", 255))), wantName: strings.Repeat("a", 255)},
		{name: "occurred_at Z", body: withAt(q("2024-05-01T10:00:00Z")), wantAt: time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)},
		{name: "occurred_at negative offset", body: withAt(q("2024-05-01T10:00:00.5-07:30")), wantAt: time.Date(2024, 5, 1, 10, 0, 0, 5e8, time.FixedZone("", -(7*3600+1800)))},
		{name: "occurred_at -00:00", body: withAt(q("2024-05-01T10:00:00-00:00")), wantAt: time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)},
		{name: "occurred_at leap day", body: withAt(q("2024-02-29T23:59:59.000000001+23:59")), wantAt: time.Date(2024, 2, 29, 23, 59, 59, 1, time.FixedZone("", 23*3600+59*60))},
		{name: "occurred_at year 0000", body: withAt(q("0000-01-01T00:00:00Z")), wantAt: time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)},
		{name: "depth exactly 64 (arrays)", body: withPayload(`{"a":` + nest(MaxDepth-2, "1") + `}`)},
		{name: "depth exactly 64 (objects)", body: withPayload(nestObj(MaxDepth-1, "1"))},
		{name: "body exactly at the limit", body: good().body()},
	}
	for _, d := range decoders {
		for _, tc := range tests {
			t.Run(d.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				body := []byte(tc.body)
				env, err := d.decode(body, len(body))
				require.NoError(t, err)
				require.True(t, json.Valid(body))

				wantID := tc.wantID
				if wantID == "" {
					wantID = idV7
				}
				require.Equal(t, uuid.MustParse(wantID), env.EventID)
				wantName := tc.wantName
				if wantName == "" {
					wantName = idName
				}
				require.Equal(t, wantName, env.EventName)
				at := tc.wantAt
				if at.IsZero() {
					at = wantAt
				}
				require.True(t, at.Equal(env.OccurredAt), "%v != %v", at, env.OccurredAt)
				_, wo := at.Zone()
				_, go_ := env.OccurredAt.Zone()
				require.Equal(t, wo, go_)

				wantPayload := tc.wantPayload
				if wantPayload == "" {
					var raw map[string]json.RawMessage
					require.NoError(t, json.Unmarshal(body, &raw))
					wantPayload = string(raw["payload"])
				}
				require.Equal(t, wantPayload, string(env.Payload))

				// The payload is what encoding/json sees too, and it round-trips.
				out, err := Encode(env)
				require.NoError(t, err)
				env2, err := d.decode(out, 0)
				require.NoError(t, err)
				requireSameEnvelope(t, env, env2)
			})
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	t.Parallel()
	goodBody := good().body()
	bigObj := func(dupAt int) string {
		var b strings.Builder
		b.WriteString("{")
		for i := range 100 {
			fmt.Fprintf(&b, `"k%d":%d,`, i, i)
		}
		fmt.Fprintf(&b, `"k%d":0}`, dupAt)
		return b.String()
	}

	tests := []struct {
		name   string
		body   string
		field  string
		reason string
	}{
		// body
		{"empty", "", FieldBody, "empty"},
		{"only whitespace", " \n\t ", FieldBody, "only whitespace"},
		{"array", `[]`, FieldBody, "must be a JSON object, got an array"},
		{"string", `"x"`, FieldBody, "got a string"},
		{"null", `null`, FieldBody, "got null"},
		{"number", `42`, FieldBody, "got a number"},
		{"garbage", `<xml/>`, FieldBody, "invalid character '<'"},
		{"UTF-8 BOM", "\ufeff" + goodBody, FieldBody, "invalid character"},
		{"trailing object", goodBody + ` {}`, FieldBody, "unexpected data after the JSON object"},
		{"trailing garbage", goodBody + `x`, FieldBody, "unexpected data after the JSON object"},
		{"trailing brace", goodBody + `}`, FieldBody, "unexpected data after the JSON object"},
		{"trailing NUL byte", goodBody + "\x00", FieldBody, "unexpected data after the JSON object"},
		{"trailing invalid UTF-8", goodBody + "\xff", FieldBody, "unexpected data after the JSON object"},
		{"truncated", goodBody[:len(goodBody)-1], FieldBody, "unexpected end of input"},
		{"truncated in payload", goodBody[:len(goodBody)-2], FieldPayload, "unexpected end of input"},
		{"truncated in payload string", goodBody[:len(goodBody)-10], FieldPayload, "unterminated string"},
		{"truncated in string", goodBody[:20], FieldEventID, "unterminated string"},
		{"trailing comma top-level", strings.TrimSuffix(goodBody, "}") + `,}`, FieldBody, "expected a string key"},
		{"missing colon", `{"event_id" "` + idV7 + `"}`, FieldBody, "expected ':'"},
		{"unquoted key", `{event_id:"` + idV7 + `"}`, FieldBody, "expected a string key"},
		{"single quotes", `{'event_id':'` + idV7 + `'}`, FieldBody, "expected a string key"},
		{"missing comma", `{"event_id":"` + idV7 + `" "event_name":"a"}`, FieldBody, "expected ',' or '}'"},
		{"invalid UTF-8 in payload", withPayload("{\"a\":\"\xff\"}"), FieldPayload, "invalid UTF-8"},
		{"overlong UTF-8 in payload", withPayload("{\"a\":\"\xc0\xaf\"}"), FieldPayload, "invalid UTF-8"},
		{"UTF-8 encoded surrogate", withPayload("{\"a\":\"\xed\xa0\x80\"}"), FieldPayload, "invalid UTF-8"},
		{"truncated UTF-8 sequence", withPayload("{\"a\":\"\xe4\xb8\"}"), FieldPayload, "invalid UTF-8"},
		{"invalid UTF-8 in payload key", withPayload("{\"\xfe\":1}"), FieldPayload, "invalid UTF-8"},
		{"invalid UTF-8 in top-level key", "{\"event_id\xff\":1}", FieldBody, "invalid UTF-8"},
		{"invalid UTF-8 in event_name", withName("\"a\x80b\""), FieldEventName, "invalid UTF-8"},
		{"non-ASCII outside strings", withPayload("{\"a\":1\u00a0}"), FieldPayload, "invalid character byte 0xc2"},
		{"comment", withPayload(`{"a":1 /* c */}`), FieldPayload, "expected ',' or '}'"},
		{"trailing comma in payload", withPayload(`{"a":1,}`), FieldPayload, "expected a string key"},
		{"trailing comma in array", withPayload(`{"a":[1,]}`), FieldPayload, "expected a value"},
		{"NaN", withPayload(`{"a":NaN}`), FieldPayload, "expected a value"},
		{"leading zero", withPayload(`{"a":01}`), FieldPayload, "expected ',' or '}'"},
		{"leading plus", withPayload(`{"a":+1}`), FieldPayload, "expected a value"},
		{"bare fraction", withPayload(`{"a":.5}`), FieldPayload, "expected a value"},
		{"dot without digits", withPayload(`{"a":1.}`), FieldPayload, "expected a digit"},
		{"exponent without digits", withPayload(`{"a":1e+}`), FieldPayload, "expected a digit"},
		{"minus alone", withPayload(`{"a":-}`), FieldPayload, "expected a digit"},
		{"bad literal", withPayload(`{"a":tru}`), FieldPayload, "invalid literal"},
		{"literal with suffix", withPayload(`{"a":nullx}`), FieldPayload, "expected ',' or '}'"},
		{"invalid escape", withPayload(`{"a":"\x41"}`), FieldPayload, "invalid escape"},
		{"short unicode escape", withPayload(`{"a":"\u12"}`), FieldPayload, `invalid \u escape`},
		{"non-hex unicode escape", withPayload(`{"a":"\u12g4"}`), FieldPayload, `invalid \u escape`},

		// keys
		{"unknown key", strings.TrimSuffix(goodBody, "}") + `,"extra":1}`, "extra", "unknown key"},
		{"upper-case key", `{"EVENT_ID":"` + idV7 + `"}`, "EVENT_ID", "unknown key"},
		{"mixed-case key", strings.Replace(goodBody, `"event_name"`, `"Event_Name"`, 1), "Event_Name", "unknown key"},
		{"empty key", `{"":1}`, "", "unknown key"},
		{"key with trailing space", `{"event_id ":1}`, "event_id ", "unknown key"},
		{"missing event_id", `{"event_name":"` + idName + `","occurred_at":"` + idAt + `","payload":{}}`, FieldEventID, "missing"},
		{"missing event_name", `{"event_id":"` + idV7 + `","occurred_at":"` + idAt + `","payload":{}}`, FieldEventName, "missing"},
		{"missing occurred_at", `{"event_id":"` + idV7 + `","event_name":"` + idName + `","payload":{}}`, FieldOccurredAt, "missing"},
		{"missing payload", `{"event_id":"` + idV7 + `","event_name":"` + idName + `","occurred_at":"` + idAt + `"}`, FieldPayload, "missing"},
		{"empty object", `{}`, FieldEventID, "missing"},
		{"duplicate event_id", strings.TrimSuffix(goodBody, "}") + `,"event_id":"` + idV4 + `"}`, FieldEventID, "duplicate key"},
		{"duplicate payload", strings.TrimSuffix(goodBody, "}") + `,"payload":{}}`, FieldPayload, "duplicate key"},
		{"duplicate via escape", strings.TrimSuffix(goodBody, "}") + `,"event\u005fname":"x.y"}`, FieldEventName, "duplicate key"},
		{"duplicate in payload", withPayload(`{"a":1,"b":2,"a":3}`), "a", "duplicate key in payload"},
		{"duplicate nested in payload", withPayload(`{"a":{"b":{"c":[{"x":1,"y":{"d":1,"d":2}}]}}}`), "d", "duplicate key in payload"},
		{"duplicate in object in array", withPayload(`{"a":[{"k":1},{"k":1,"k":2}]}`), "k", "duplicate key"},
		{"duplicate via escape in payload", withPayload(`{"a":1,"\u0061":2}`), "a", "duplicate key"},
		{"duplicate escaped keys in payload", withPayload(`{"\u00e9":1,"\u00E9":2}`), "é", "duplicate key"},
		{"duplicate raw and escaped non-ASCII", withPayload(`{"é":1,"\u00e9":2}`), "é", "duplicate key"},
		{"duplicate in large object", withPayload(bigObj(7)), "k7", "duplicate key"},
		{"duplicate last key of large object", withPayload(bigObj(99)), "k99", "duplicate key"},
		{"duplicate empty key", withPayload(`{"":1,"":2}`), "", "duplicate key"},

		// event_id
		{"event_id number", withID(`123`), FieldEventID, "must be a JSON string, got a number"},
		{"event_id null", withID(`null`), FieldEventID, "got null"},
		{"event_id object", withID(`{}`), FieldEventID, "got an object"},
		{"event_id empty", withID(q("")), FieldEventID, "36 characters"},
		{"event_id braces", withID(q("{" + idV7 + "}")), FieldEventID, "36 characters"},
		{"event_id urn prefix", withID(q("urn:uuid:" + idV7)), FieldEventID, "36 characters"},
		{"event_id without hyphens", withID(q(strings.ReplaceAll(idV7, "-", ""))), FieldEventID, "36 characters"},
		{"event_id hyphen misplaced", withID(q("0190a5d16-f5e-7c3a-9b2d-3e4f5a6b7c8d")), FieldEventID, "expected '-'"},
		{"event_id non-hex", withID(q("0190a5d1-6f5e-7c3a-9b2d-3e4f5a6b7c8g")), FieldEventID, "invalid hex digit"},
		{"event_id trailing space", withID(q(idV7 + " ")), FieldEventID, "36 characters"},
		{"event_id nil", withID(q("00000000-0000-0000-0000-000000000000")), FieldEventID, "nil UUID"},
		{"event_id max", withID(q("ffffffff-ffff-ffff-ffff-ffffffffffff")), FieldEventID, "max UUID"},
		{"event_id max upper-case", withID(q("FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF")), FieldEventID, "max UUID"},
		{"event_id version 0", withID(q("0190a5d1-6f5e-0c3a-9b2d-3e4f5a6b7c8d")), FieldEventID, "version must be 1 to 8, got 0"},
		{"event_id version 9", withID(q("0190a5d1-6f5e-9c3a-9b2d-3e4f5a6b7c8d")), FieldEventID, "got 9"},
		{"event_id version f", withID(q("0190a5d1-6f5e-fc3a-9b2d-3e4f5a6b7c8d")), FieldEventID, "got 15"},
		{"event_id NCS variant", withID(q("0190a5d1-6f5e-7c3a-7b2d-3e4f5a6b7c8d")), FieldEventID, "variant"},
		{"event_id Microsoft variant", withID(q("0190a5d1-6f5e-7c3a-cb2d-3e4f5a6b7c8d")), FieldEventID, "variant"},
		{"event_id future variant", withID(q("0190a5d1-6f5e-7c3a-eb2d-3e4f5a6b7c8d")), FieldEventID, "variant"},

		// event_name
		{"event_name empty", withName(q("")), FieldEventName, "must not be empty"},
		{"event_name 256 bytes", withName(q(strings.Repeat("a", 256))), FieldEventName, "at most 255 bytes"},
		{"event_name 255 bytes after unescaping", withName(q(strings.Repeat("é", 128))), FieldEventName, "got 256"},
		{"event_name space", withName(q("order placed")), FieldEventName, "whitespace"},
		{"event_name leading space", withName(q(" order.placed")), FieldEventName, "whitespace"},
		{"event_name escaped tab", withName(q(`order\tplaced`)), FieldEventName, "whitespace"},
		{"event_name escaped newline", withName(q(`order.placed\n`)), FieldEventName, "whitespace"},
		{"event_name raw tab", withName(q("order\tplaced")), FieldEventName, "raw control character"},
		{"event_name no-break space", withName(q("order\u00a0placed")), FieldEventName, "whitespace"},
		{"event_name line separator", withName(q(`order\u2028placed`)), FieldEventName, "whitespace"},
		{"event_name ideographic space", withName(q("order\u3000placed")), FieldEventName, "whitespace"},
		{"event_name DEL", withName(q(`order\u007fplaced`)), FieldEventName, "control"},
		{"event_name C1 control", withName(q(`order\u0085placed`)), FieldEventName, "control"},
		{"event_name escape char", withName(q(`order\u001bplaced`)), FieldEventName, "control"},
		{"event_name NUL escape", withName(q(`order\u0000placed`)), FieldEventName, `\u0000`},
		{"event_name number", withName(`1`), FieldEventName, "must be a JSON string"},
		{"event_name array", withName(`["a"]`), FieldEventName, "got an array"},

		// occurred_at
		{"occurred_at number", withAt(`1714557600`), FieldOccurredAt, "must be a JSON string, got a number"},
		{"occurred_at empty", withAt(q("")), FieldOccurredAt, "too short"},
		{"occurred_at no offset", withAt(q("2024-05-01T10:00:00")), FieldOccurredAt, "too short"},
		{"occurred_at no offset with fraction", withAt(q("2024-05-01T10:00:00.123")), FieldOccurredAt, "zone must be Z"},
		{"occurred_at date only", withAt(q("2024-05-01")), FieldOccurredAt, "too short"},
		{"occurred_at lower-case t", withAt(q("2024-05-01t10:00:00Z")), FieldOccurredAt, "bad layout"},
		{"occurred_at lower-case z", withAt(q("2024-05-01T10:00:00z")), FieldOccurredAt, "zone must be Z"},
		{"occurred_at space separator", withAt(q("2024-05-01 10:00:00Z")), FieldOccurredAt, "bad layout"},
		{"occurred_at comma fraction", withAt(q("2024-05-01T10:00:00,5Z")), FieldOccurredAt, "zone must be Z"},
		{"occurred_at empty fraction", withAt(q("2024-05-01T10:00:00.Z")), FieldOccurredAt, "empty fraction"},
		{"occurred_at 10 fraction digits", withAt(q("2024-05-01T10:00:00.1234567891Z")), FieldOccurredAt, "more than 9"},
		{"occurred_at single-digit hour", withAt(q("2024-05-01T1:00:00Z")), FieldOccurredAt, "too short"},
		{"occurred_at single-digit hour with fraction", withAt(q("2024-05-01T1:00:00.5Z")), FieldOccurredAt, "bad layout"},
		{"occurred_at hour 24", withAt(q("2024-05-01T24:00:00Z")), FieldOccurredAt, "hour out of range"},
		{"occurred_at minute 60", withAt(q("2024-05-01T10:60:00Z")), FieldOccurredAt, "minute out of range"},
		{"occurred_at leap second", withAt(q("2016-12-31T23:59:60Z")), FieldOccurredAt, "second out of range"},
		{"occurred_at month 13", withAt(q("2024-13-01T10:00:00Z")), FieldOccurredAt, "month out of range"},
		{"occurred_at month 0", withAt(q("2024-00-01T10:00:00Z")), FieldOccurredAt, "month out of range"},
		{"occurred_at day 0", withAt(q("2024-05-00T10:00:00Z")), FieldOccurredAt, "day out of range"},
		{"occurred_at February 30", withAt(q("2024-02-30T10:00:00Z")), FieldOccurredAt, "day out of range"},
		{"occurred_at February 29 non-leap", withAt(q("2023-02-29T10:00:00Z")), FieldOccurredAt, "day out of range"},
		{"occurred_at February 29 1900", withAt(q("1900-02-29T10:00:00Z")), FieldOccurredAt, "day out of range"},
		{"occurred_at April 31", withAt(q("2024-04-31T10:00:00Z")), FieldOccurredAt, "day out of range"},
		{"occurred_at offset +24:00", withAt(q("2024-05-01T10:00:00+24:00")), FieldOccurredAt, "zone offset out of range"},
		{"occurred_at offset minutes 60", withAt(q("2024-05-01T10:00:00+01:60")), FieldOccurredAt, "zone offset out of range"},
		{"occurred_at offset without colon", withAt(q("2024-05-01T10:00:00+0100")), FieldOccurredAt, "zone must be Z"},
		{"occurred_at offset hours only", withAt(q("2024-05-01T10:00:00+01")), FieldOccurredAt, "zone must be Z"},
		{"occurred_at bad offset digits", withAt(q("2024-05-01T10:00:00+0a:00")), FieldOccurredAt, "bad zone offset"},
		{"occurred_at named zone", withAt(q("2024-05-01T10:00:00 UTC")), FieldOccurredAt, "zone must be Z"},
		{"occurred_at trailing space", withAt(q("2024-05-01T10:00:00Z ")), FieldOccurredAt, "zone must be Z"},
		{"occurred_at signed year", withAt(q("+2024-05-01T10:00:00Z")), FieldOccurredAt, "bad layout"},
		{"occurred_at five-digit year", withAt(q("10000-05-01T10:00:00Z")), FieldOccurredAt, "bad layout"},

		// payload
		{"payload array", withPayload(`[1,2]`), FieldPayload, "must be a JSON object, got an array"},
		{"payload string", withPayload(`"{}"`), FieldPayload, "got a string"},
		{"payload null", withPayload(`null`), FieldPayload, "got null"},
		{"payload number", withPayload(`1`), FieldPayload, "got a number"},
		{"payload boolean", withPayload(`true`), FieldPayload, "got a boolean"},
		{"payload invalid value", withPayload(`x`), FieldPayload, "expected a value"},
		{"payload unterminated", `{"payload":{"a":1`, FieldPayload, "unexpected end of input"},

		// NUL, control characters, surrogates
		{"NUL escape in payload value", withPayload(`{"a":"x\u0000y"}`), FieldPayload, `\u0000 (NUL)`},
		{"NUL escape in payload key", withPayload(`{"a\u0000":1}`), FieldPayload, `\u0000 (NUL)`},
		{"NUL escape deep in payload", withPayload(`{"a":[{"b":["\u0000"]}]}`), FieldPayload, `\u0000 (NUL)`},
		{"NUL escape upper-case", withPayload(`{"a":"\U0000"}`), FieldPayload, "invalid escape"},
		{"NUL escape in top-level key", `{"event_id\u0000":1}`, FieldBody, `\u0000 (NUL)`},
		{"NUL escape in event_id", withID(q(`\u0000`)), FieldEventID, `\u0000 (NUL)`},
		{"NUL escape in occurred_at", withAt(q(`2024-05-01T10:00:00Z\u0000`)), FieldOccurredAt, `\u0000 (NUL)`},
		{"raw NUL in payload string", withPayload("{\"a\":\"x\x00y\"}"), FieldPayload, "raw NUL"},
		{"raw newline in payload string", withPayload("{\"a\":\"x\ny\"}"), FieldPayload, "raw control character"},
		{"raw unit separator in payload key", withPayload("{\"a\x1f\":1}"), FieldPayload, "raw control character"},
		{"lone high surrogate", withPayload(`{"a":"\ud800"}`), FieldPayload, "lone UTF-16 high surrogate"},
		{"lone high surrogate at end of input", `{"payload":{"a":"\ud800`, FieldPayload, "lone UTF-16 high surrogate"},
		{"high surrogate then non-surrogate", withPayload(`{"a":"\ud800\u0041"}`), FieldPayload, "lone UTF-16 high surrogate"},
		{"two high surrogates", withPayload(`{"a":"\ud800\ud800"}`), FieldPayload, "lone UTF-16 high surrogate"},
		{"lone low surrogate", withPayload(`{"a":"\udc00"}`), FieldPayload, "lone UTF-16 low surrogate"},
		{"reversed surrogate pair", withPayload(`{"a":"\ude00\ud83d"}`), FieldPayload, "lone UTF-16 low surrogate"},

		// depth
		{"depth 65 arrays", withPayload(`{"a":` + nest(MaxDepth-1, "1") + `}`), FieldPayload, "nesting deeper than 64"},
		{"depth 65 objects", withPayload(nestObj(MaxDepth, "1")), FieldPayload, "nesting deeper than 64"},
		{"depth 100000", withPayload(`{"a":` + nest(100000, "") + `}`), FieldPayload, "nesting deeper than 64"},
		{"depth 100000 unterminated", withPayload(`{"a":` + strings.Repeat("[", 100000)), FieldPayload, "nesting deeper than 64"},
		{"deep value of event_id", withID(nest(100000, "")), FieldEventID, "nesting deeper than 64"},
	}
	for _, d := range decoders {
		for _, tc := range tests {
			t.Run(d.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				env, err := d.decode([]byte(tc.body), 0)
				requireFieldError(t, err, tc.field, tc.reason)
				require.Equal(t, Envelope{}, env)
				require.True(t, strings.HasPrefix(err.Error(), "envelope: "), err.Error())
			})
		}
	}
}

func TestDecodeTooLarge(t *testing.T) {
	t.Parallel()
	for _, d := range decoders {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			testDecodeTooLarge(t, d.decode)
		})
	}
}

func testDecodeTooLarge(t *testing.T, decode func([]byte, int) (Envelope, error)) {
	body := []byte(good().body())
	huge := make([]byte, DefaultMaxBodyBytes+1)
	for i := range huge {
		huge[i] = 0xff // not even UTF-8: the size is checked first
	}

	tests := []struct {
		name     string
		body     []byte
		maxBytes int
	}{
		{"one byte over an explicit limit", body, len(body) - 1},
		{"over a small limit", body, 10},
		{"invalid body over the limit", []byte(`not json at all`), 5},
		{"default limit with 0", huge, 0},
		{"default limit with negative", huge, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := decode(tc.body, tc.maxBytes)
			requireFieldError(t, err, FieldBody, "exceeds the limit")
			require.ErrorIs(t, err, ErrTooLarge)
		})
	}

	t.Run("at the limit", func(t *testing.T) {
		t.Parallel()
		_, err := decode(body, len(body))
		require.NoError(t, err)
	})
	t.Run("default limit at the limit", func(t *testing.T) {
		t.Parallel()
		p := good()
		prefix := `{"pad":"`
		suffix := `"}`
		p.payload = prefix + suffix
		pad := DefaultMaxBodyBytes - len(p.body())
		p.payload = prefix + strings.Repeat("x", pad) + suffix
		b := []byte(p.body())
		require.Len(t, b, DefaultMaxBodyBytes)
		_, err := decode(b, 0)
		require.NoError(t, err)
		_, err = decode(append(b, ' '), 0)
		require.ErrorIs(t, err, ErrTooLarge)
	})
	t.Run("other errors do not wrap ErrTooLarge", func(t *testing.T) {
		t.Parallel()
		_, err := decode([]byte(`{}`), 0)
		require.Error(t, err)
		require.NotErrorIs(t, err, ErrTooLarge)
	})
}

// The payload is the body's own bytes (no copy per message), capped so
// that appending to it cannot overwrite the rest of the body; the other
// fields are copies.
func TestDecodePayloadAliasesBody(t *testing.T) {
	t.Parallel()
	for _, d := range decoders {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			body := []byte(good().body())
			orig := slices.Clone(body)
			env, err := d.decode(body, 0)
			require.NoError(t, err)
			want := json.RawMessage(goodPayload) // compared byte for byte, not as JSON
			require.Equal(t, want, env.Payload)
			require.Equal(t, len(env.Payload), cap(env.Payload), "capacity capped at the payload's end")
			_ = append(env.Payload, "XXXXXXXX"...)
			require.Equal(t, orig, body, "an append to the payload leaves the body alone")
			for i := range body {
				body[i] = 'X'
			}
			require.Equal(t, bytes.Repeat([]byte("X"), len(want)), []byte(env.Payload), "the payload is the body's bytes")
			require.Equal(t, idName, env.EventName, "the name is a copy")
		})
	}
}

func TestDecodeTimeAgreesWithStdlib(t *testing.T) {
	t.Parallel()
	values := []string{
		"2024-05-01T10:00:00Z",
		"2024-05-01T10:00:00.1Z",
		"2024-05-01T10:00:00.123456789Z",
		"2024-05-01T10:00:00.000000001+14:00",
		"2024-05-01T10:00:00+05:45",
		"2024-05-01T10:00:00-12:00",
		"2024-05-01T10:00:00+23:59",
		"2024-12-31T23:59:59.999999999-23:59",
		"0000-01-01T00:00:00+01:00",
		"9999-12-31T23:59:59Z",
		"2000-02-29T12:00:00Z",
	}
	for _, v := range values {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			got, ferr := parseOccurredAt([]byte(v))
			require.Nil(t, ferr)
			want, err := time.Parse(time.RFC3339Nano, v)
			require.NoError(t, err)
			require.True(t, want.Equal(got), "%v != %v", want, got)
			_, wo := want.Zone()
			_, gotOff := got.Zone()
			require.Equal(t, wo, gotOff)
			require.Equal(t, v, got.Format(time.RFC3339Nano))
		})
	}
}

func TestDecodeConcurrent(t *testing.T) {
	t.Parallel()
	bodies := [][]byte{
		[]byte(good().body()),
		[]byte(withPayload(`{"a":{"b":1},"\u0063":[{"a":1,"b":2}],"k":{"` + strings.Repeat(`x":1,"`, 1) + `y":2}}`)),
		[]byte(withPayload(`{"a":1,"a":2}`)),
		[]byte(withPayload(`{"e\u0301":{"x":1},"é":2}`)),
	}
	var wg sync.WaitGroup
	for g := range 8 {
		decode := decoders[g%len(decoders)].decode
		wg.Go(func() {
			for i := range 2000 {
				b := bodies[(g+i)%len(bodies)]
				env, err := decode(b, 0)
				switch (g + i) % len(bodies) {
				case 2:
					if err == nil {
						t.Errorf("duplicate accepted")
						return
					}
				default:
					if err != nil || env.EventID.String() != idV7 {
						t.Errorf("decode: %v", err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

func TestDecodeAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	// Not parallel: testing.AllocsPerRun refuses to run in a parallel test.
	body := []byte(good().body())
	for _, d := range decoders {
		allocs := testing.AllocsPerRun(1000, func() {
			if _, err := d.decode(body, 0); err != nil {
				panic(err)
			}
		})
		// The event name only: the payload aliases the body, scratch space
		// is pooled, and time caches the zones of whole-hour offsets
		// (+02:00 here).
		require.LessOrEqual(t, allocs, 1.0, d.name)
	}
}

func TestFieldError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  *FieldError
		want string
	}{
		{"plain", &FieldError{Field: "event_id", Reason: "nil UUID"}, "envelope: event_id: nil UUID"},
		{"key with space", &FieldError{Field: "a b", Reason: "unknown key"}, `envelope: "a b": unknown key`},
		{"key with newline", &FieldError{Field: "a\nb", Reason: "unknown key"}, `envelope: "a\nb": unknown key`},
		{"key with colon", &FieldError{Field: "a:b", Reason: "unknown key"}, `envelope: "a:b": unknown key`},
		{"empty key", &FieldError{Field: "", Reason: "unknown key"}, `envelope: "": unknown key`},
		{"non-ASCII key", &FieldError{Field: "é", Reason: "duplicate key"}, `envelope: "é": duplicate key`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tc.err.Error())
			require.NoError(t, tc.err.Unwrap())
		})
	}

	for _, d := range decoders {
		t.Run("long unknown key is truncated/"+d.name, func(t *testing.T) {
			t.Parallel()
			key := strings.Repeat("é", 100)
			_, err := d.decode([]byte(`{"`+key+`":1}`), 0)
			requireFieldError(t, err, strings.Repeat("é", 32)+"...", "unknown key")
		})
	}
}

func TestWordNeedsAttention(t *testing.T) {
	t.Parallel()
	naive := func(w uint64) bool {
		for range 8 {
			if !strSafe[byte(w)] {
				return true
			}
			w >>= 8
		}
		return false
	}
	const safe = 0x6161616161616161 // "aaaaaaaa"
	require.False(t, wordNeedsAttention(safe))
	for pos := range 8 {
		for c := range 256 {
			w := safe&^(0xff<<(8*pos)) | uint64(c)<<(8*pos)
			require.Equal(t, naive(w), wordNeedsAttention(w), "byte %#x at %d", c, pos)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 200000 {
		w := r.Uint64()
		if r.IntN(2) == 0 {
			w &= 0x7f7f7f7f7f7f7f7f // ASCII only
			w |= 0x2020202020202020
		}
		require.Equal(t, naive(w), wordNeedsAttention(w), "word %#x", w)
	}
}

// TestDuplicateKeysAgainstStdlib compares duplicate detection, on random
// payloads with small and large (hash-indexed) objects nested in each
// other, with an independent check built on encoding/json's tokenizer.
func TestDuplicateKeysAgainstStdlib(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	var gen func(b *strings.Builder, depth int)
	gen = func(b *strings.Builder, depth int) {
		n := r.IntN(4)
		if r.IntN(3) == 0 {
			n = smallObject - 2 + r.IntN(120)
		}
		space := 1 + n + r.IntN(2*n+1) // key space: collisions are likely but not certain
		b.WriteString("{")
		for i := range n {
			if i > 0 {
				b.WriteString(",")
			}
			k := r.IntN(space)
			switch r.IntN(4) {
			case 0: // same key, escaped
				fmt.Fprintf(b, `"\u006b%d":`, k)
			default:
				fmt.Fprintf(b, `"k%d":`, k)
			}
			if depth > 0 && r.IntN(12) == 0 {
				gen(b, depth-1)
			} else {
				fmt.Fprintf(b, "%d", i)
			}
		}
		b.WriteString("}")
	}
	accepted, refused := 0, 0
	for range 1500 {
		var p strings.Builder
		gen(&p, 3)
		body := []byte(withPayload(p.String()))
		stdErr := stdlibCheck(body)
		for _, d := range decoders {
			_, err := d.decode(body, 0)
			if stdErr == nil {
				require.NoError(t, err, "%s: body %s", d.name, body)
				continue
			}
			require.Contains(t, stdErr.Error(), "duplicate key")
			requireFieldError(t, err, strings.TrimSuffix(strings.TrimPrefix(stdErr.Error(), `duplicate key "`), `"`), "duplicate key in payload")
		}
		if stdErr == nil {
			accepted++
		} else {
			refused++
		}
	}
	require.Greater(t, accepted, 150)
	require.Greater(t, refused, 150)
}
