package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// stdlibCheck walks body with encoding/json's tokenizer, an implementation
// independent of ours, and reports duplicate keys (compared after
// unescaping), nesting deeper than MaxDepth and NUL characters.
func stdlibCheck(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	type frame struct {
		obj     bool
		keys    map[string]bool
		wantKey bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		isKey := top != nil && top.obj && top.wantKey
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				if top != nil && top.obj {
					top.wantKey = true
				}
				stack = append(stack, &frame{obj: v == '{', keys: map[string]bool{}, wantKey: true})
				if len(stack) > MaxDepth {
					return errors.New("too deep")
				}
			default:
				stack = stack[:len(stack)-1]
			}
			continue
		case string:
			if strings.ContainsRune(v, 0) {
				return errors.New("NUL")
			}
			if isKey {
				if top.keys[v] {
					return fmt.Errorf("duplicate key %q", v)
				}
				top.keys[v] = true
				top.wantKey = false
				continue
			}
		}
		if top != nil && top.obj {
			top.wantKey = true
		}
	}
}

// checkAccepted verifies what must hold for every body Decode accepts.
func checkAccepted(t *testing.T, body []byte, env Envelope) {
	t.Helper()
	// encoding/json agrees that it is JSON, and valid UTF-8 throughout.
	require.True(t, json.Valid(body), "Decode accepted invalid JSON %q", body)
	require.True(t, utf8.Valid(body), "Decode accepted invalid UTF-8 %q", body)
	require.NoError(t, stdlibCheck(body), "body %q", body)

	// encoding/json sees the same four values.
	var raw map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(body, &raw))
	require.Len(t, raw, 4)
	var id, name, at string
	require.NoError(t, json.Unmarshal(raw[FieldEventID], &id))
	require.NoError(t, json.Unmarshal(raw[FieldEventName], &name))
	require.NoError(t, json.Unmarshal(raw[FieldOccurredAt], &at))
	require.Equal(t, uuid.MustParse(id), env.EventID)
	require.Equal(t, name, env.EventName)
	require.Equal(t, string(raw[FieldPayload]), string(env.Payload))
	stdAt, err := time.Parse(time.RFC3339Nano, at)
	require.NoError(t, err)
	require.True(t, stdAt.Equal(env.OccurredAt))
	_, so := stdAt.Zone()
	_, eo := env.OccurredAt.Zone()
	require.Equal(t, so, eo)
	// The payload is a JSON object. Numbers are taken as written: the
	// envelope bounds none (1E700 is valid JSON, not a float64).
	var p map[string]any
	dec := json.NewDecoder(bytes.NewReader(env.Payload))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&p))

	// Encode accepts it and the result decodes to the same envelope.
	out, err := Encode(env)
	require.NoError(t, err, "Encode refused what Decode accepted: %q", body)
	env2, err := Decode(out, 0)
	require.NoError(t, err, "Decode refused what Encode wrote: %q", out)
	requireSameEnvelope(t, env, env2)
	out2, err := Encode(env2)
	require.NoError(t, err)
	require.Equal(t, string(out), string(out2))
}

// decodeSeeds are the seeds of FuzzDecode and FuzzJSONv2Agrees besides
// the files in testdata/fuzz/FuzzDecode.
func decodeSeeds() []string {
	return []string{
		good().body(),
		withID(q(idV4)),
		withID(q(strings.ToUpper(idV7))),
		withPayload(`{"big":123456789012345678901234567890,"f":-1.5e-300,"a":[true,false,null,{}]}`),
		withPayload(`{"caf\u00e9":"\u00e9","emoji":"\ud83d\ude00","raw":"é中😀"}`),
		withName(q(`caf\u00e9.v1`)),
		withAt(q("2024-02-29T23:59:59.999999999-23:59")),
		withPayload(`{"a":1,"a":2}`),
		withPayload(`{"a":1,"\u0061":2}`),
		withPayload(`{"a":"\u0000"}`),
		withPayload(`{"a":"\ud800"}`),
		withPayload("{\"a\":\"\xff\"}"),
		withPayload(`{"a":` + nest(MaxDepth-1, "") + `}`),
		withID(q("{" + idV7 + "}")),
		withID(q("00000000-0000-0000-0000-000000000000")),
		`{"EVENT_ID":"` + idV7 + `"}`,
		good().body() + ` {}`,
		`{}`,
		``,
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range decodeSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		env, err := Decode(body, 0)
		if err != nil {
			var fe *FieldError
			require.ErrorAs(t, err, &fe, "%T is not a *FieldError", err)
			require.True(t, strings.HasPrefix(err.Error(), "envelope: "))
			require.Equal(t, Envelope{}, env)
			return
		}
		checkAccepted(t, body, env)
	})
}

func FuzzEncode(f *testing.F) {
	v7, v4 := uuid.MustParse(idV7), uuid.MustParse(idV4)
	f.Add(v7[:], idName, int64(1714557600), int64(123456789), int32(7200), []byte(goodPayload))
	f.Add(v4[:], "a\"b\\c", int64(-62135596800), int64(0), int32(0), []byte(`{}`))
	f.Add([]byte{}, "", int64(0), int64(0), int32(30), []byte(`[]`))
	f.Add(uuid.Max[:], "x y", int64(253402300800), int64(-1), int32(-86400), []byte(` {"a":1}`))
	f.Fuzz(func(t *testing.T, id []byte, name string, sec, nsec int64, off int32, payload []byte) {
		var e Envelope
		copy(e.EventID[:], id)
		e.EventName = name
		e.OccurredAt = time.Unix(sec, nsec).In(time.FixedZone("", int(off)))
		e.Payload = payload
		out, err := Encode(e)
		if err != nil {
			var fe *FieldError
			require.ErrorAs(t, err, &fe, "%T is not a *FieldError", err)
			require.Nil(t, out)
			return
		}
		require.True(t, json.Valid(out))
		back, err := Decode(out, 0)
		require.NoError(t, err, "Decode refused what Encode wrote: %q", out)
		requireSameEnvelope(t, e, back)
	})
}

// decodeCorpus returns the checked-in seed files of FuzzDecode by name.
func decodeCorpus(t testing.TB) map[string][]byte {
	t.Helper()
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.NotEmpty(t, entries)
	corpus := make(map[string][]byte, len(entries))
	for _, entry := range entries {
		content, err := os.ReadFile(filepath.Join(dir, entry.Name()))
		require.NoError(t, err)
		header, value, ok := strings.Cut(strings.TrimSpace(string(content)), "\n")
		require.True(t, ok, entry.Name())
		require.Equal(t, "go test fuzz v1", header, entry.Name())
		require.True(t, strings.HasPrefix(value, "[]byte(") && strings.HasSuffix(value, ")"), value)
		body, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(value, "[]byte("), ")"))
		require.NoError(t, err, entry.Name())
		corpus[entry.Name()] = []byte(body)
	}
	return corpus
}

// TestFuzzDecodeCorpus checks that the checked-in seed files mean what their
// names say: valid_* decode, every other seed is refused.
func TestFuzzDecodeCorpus(t *testing.T) {
	t.Parallel()
	for name, body := range decodeCorpus(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, d := range decoders {
				env, err := d.decode(body, 0)
				if strings.HasPrefix(name, "valid_") {
					require.NoError(t, err, d.name)
					checkAccepted(t, body, env)
				} else {
					var fe *FieldError
					require.ErrorAs(t, err, &fe, d.name)
				}
			}
		})
	}
}
