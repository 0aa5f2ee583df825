package envelope

// decodeJSONv2 is Decode rebuilt on github.com/go-json-experiment/json (the
// proposed encoding/json/v2), kept beside the tests as the contender of the
// head-to-head benchmark (BenchmarkDecodeHeadToHead), so that the
// comparison can be made again with the same strictness, and as a second
// validator for FuzzJSONv2Agrees. It lives in a _test.go file because it
// lost by about 2x: see "Why not encoding/json/v2" in scan.go.
//
// What the library does here: all of the JSON grammar, UTF-8 validation
// (invalid bytes and lone surrogate escapes), duplicate names at every
// depth compared after unescaping, and case-sensitive names; and, reading
// from a bytes.Buffer, it returns values as capped sub-slices of the body,
// so the payload aliases it as Decode's does. What it lacks, added below:
// refusing \u0000 escapes, a nesting limit of MaxDepth (its own limit is a
// fixed 10000 levels: jsontext.WithDepthLimit is declared but not
// implemented in v1.27.2), the envelope's own rules (the four keys, UUID,
// name and time profiles, the payload's type, trailing data) and Decode's
// error texts. A struct with json.RejectUnknownMembers(true) would say
// "unknown key" for us but copies every value, and Unmarshal into a
// reused struct of jsontext.Value fields alone, before any check, takes
// 1.8 to 1.9 times Decode's time (impl=v2-unmarshal-floor), so the decoder
// reads tokens itself. The error path re-reads the body (walker) to word
// the fault as Decode does; that costs only refused bodies.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/google/uuid"
	"github.com/platformd/platformd/internal/procstat"
	"github.com/stretchr/testify/require"
)

// jsonv2Opts are the library's defaults, spelled out because they are the
// strictness Decode needs.
var jsonv2Opts = []jsontext.Options{
	jsontext.AllowDuplicateNames(false),
	jsontext.AllowInvalidUTF8(false),
}

// jsonv2State is the pooled working memory of decodeJSONv2: a Decoder
// costs about 1 KiB to allocate.
type jsonv2State struct {
	rd   bytes.Buffer
	dec  jsontext.Decoder
	buf  []byte // unquoted keys and string values
	body []byte
}

var jsonv2Pool = sync.Pool{New: func() any { return &jsonv2State{buf: make([]byte, 0, 256)} }}

func decodeJSONv2(body []byte, maxBytes int) (Envelope, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBodyBytes
	}
	if len(body) == 0 {
		return Envelope{}, &FieldError{Field: FieldBody, Reason: "empty body"}
	}
	if len(body) > maxBytes {
		return Envelope{}, tooLarge(len(body), maxBytes)
	}
	st := jsonv2Pool.Get().(*jsonv2State)
	st.body = body
	// The decoder reads a bytes.Buffer in place: values are sub-slices of
	// body, not copies.
	st.rd = *bytes.NewBuffer(body)
	st.dec.Reset(&st.rd, jsonv2Opts...)
	env, err := st.decode()
	st.body = nil
	st.rd = bytes.Buffer{}
	if cap(st.buf) > 64<<10 {
		st.buf = make([]byte, 0, 256)
	}
	jsonv2Pool.Put(st)
	if err != nil {
		return Envelope{}, err
	}
	return env, nil
}

func (st *jsonv2State) decode() (Envelope, *FieldError) {
	var env Envelope
	dec, body := &st.dec, st.body
	switch k := dec.PeekKind(); k {
	case '{':
	case 0:
		_, err := dec.ReadToken()
		if errors.Is(err, io.EOF) {
			return env, &FieldError{Field: FieldBody, Reason: "no JSON object, only whitespace"}
		}
		return env, unexpectedAt(body, FieldBody, libOffset(err, len(body)), "'{'")
	case '}', ']':
		return env, unexpectedAt(body, FieldBody, len(body)-len(bytes.TrimLeft(body, " \t\r\n")), "'{'")
	default:
		return env, &FieldError{Field: FieldBody, Reason: "must be a JSON object, got " + kindOf(byte(k))}
	}
	if _, err := dec.ReadToken(); err != nil {
		return env, st.fault(err, FieldBody)
	}
	var seen uint8
	for dec.PeekKind() != '}' {
		keyPos := int(dec.InputOffset())
		name, err := dec.ReadValue() // reports a bad comma or a bad key too
		if err != nil {
			return env, st.fault(err, FieldBody)
		}
		keyPos += bytes.IndexByte(body[keyPos:], '"')
		key := name[1 : len(name)-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			st.buf, _ = jsontext.AppendUnquote(st.buf[:0], name)
			key = st.buf
			if bytes.IndexByte(key, 0) >= 0 {
				return env, st.firstFault(keyPos+len(name), FieldBody)
			}
		}
		var bit uint8
		var field string
		switch string(key) {
		case FieldEventID:
			bit, field = bitEventID, FieldEventID
		case FieldEventName:
			bit, field = bitEventName, FieldEventName
		case FieldOccurredAt:
			bit, field = bitOccurredAt, FieldOccurredAt
		case FieldPayload:
			bit, field = bitPayload, FieldPayload
		default:
			return env, &FieldError{Field: keyField(key), Reason: "unknown key at offset " + strconv.Itoa(keyPos)}
		}
		seen |= bit // the library refused a duplicate name already
		v, err := dec.ReadValue()
		if err != nil {
			return env, st.fault(err, field)
		}
		end := int(dec.InputOffset())
		if hasNULEscape(v) || tooDeep(v) {
			if f := st.firstFault(end, field); f != nil {
				return env, f
			}
		}
		if err := st.topValue(&env, bit, field, v); err != nil {
			return env, err
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return env, st.fault(err, FieldBody)
	}
	pos := int(dec.InputOffset())
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		for pos < len(body) && isSpace(body[pos]) {
			pos++
		}
		return env, &FieldError{Field: FieldBody, Reason: "unexpected data after the JSON object at offset " + strconv.Itoa(pos)}
	}
	for _, k := range topKeys {
		if seen&k.bit == 0 {
			return env, &FieldError{Field: k.name, Reason: "required key is missing"}
		}
	}
	return env, nil
}

// topValue checks the raw value v of a top-level key and stores it in env.
func (st *jsonv2State) topValue(env *Envelope, bit uint8, field string, v jsontext.Value) *FieldError {
	if bit == bitPayload {
		if v.Kind() != '{' {
			return &FieldError{Field: field, Reason: "must be a JSON object, got " + kindOf(v[0])}
		}
		env.Payload = []byte(v) // capped by the library: an append cannot reach the body
		return nil
	}
	if v.Kind() != '"' {
		return &FieldError{Field: field, Reason: "must be a JSON string, got " + kindOf(v[0])}
	}
	s := []byte(v[1 : len(v)-1])
	if bytes.IndexByte(s, '\\') >= 0 {
		st.buf, _ = jsontext.AppendUnquote(st.buf[:0], v)
		s = st.buf
	}
	var err *FieldError
	switch bit {
	case bitEventID:
		env.EventID, err = parseUUID(s)
	case bitEventName:
		if err = checkEventName(s); err == nil {
			env.EventName = string(s)
		}
	case bitOccurredAt:
		env.OccurredAt, err = parseOccurredAt(s)
	}
	return err
}

// hasNULEscape reports whether the well-formed value v has a \u0000
// escape: a backslash can only be in a string, and it starts an escape
// when an even number of backslashes precede it.
func hasNULEscape(v []byte) bool {
	for off := 0; ; {
		j := bytes.Index(v[off:], []byte(`\u0000`))
		if j < 0 {
			break
		}
		j += off
		k := j
		for k > 0 && v[k-1] == '\\' {
			k--
		}
		if (j-k)%2 == 0 {
			return true
		}
		off = j + 1
	}
	return false
}

// tooDeep reports whether the well-formed value v, inside the envelope
// object, nests deeper than MaxDepth. Nesting that deep needs MaxDepth
// brackets, which two vectorised counts rule out for most bodies.
func tooDeep(v []byte) bool {
	if bytes.Count(v, []byte("{"))+bytes.Count(v, []byte("[")) < MaxDepth {
		return false
	}
	depth := 1
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '{', '[':
			if depth++; depth > MaxDepth {
				return true
			}
		case '}', ']':
			depth--
		case '"':
			for { // to the closing quote: one preceded by an even run of backslashes
				i += 1 + bytes.IndexByte(v[i+1:], '"')
				k := i
				for v[k-1] == '\\' {
					k--
				}
				if (i-k)%2 == 0 {
					break
				}
			}
		}
	}
	return false
}

// libOffset is the offset at which the library stopped, or n if err is
// not one of its syntactic errors.
func libOffset(err error, n int) int {
	var se *jsontext.SyntacticError
	if errors.As(err, &se) {
		return int(se.ByteOffset)
	}
	return n
}

// fault turns an error of the library into Decode's, field being the
// top-level key whose value was being read (FieldBody between values).
func (st *jsonv2State) fault(err error, field string) *FieldError {
	var se *jsontext.SyntacticError
	if !errors.As(err, &se) {
		return &FieldError{Field: FieldBody, Reason: err.Error()}
	}
	off := int(se.ByteOffset)
	w := walker{body: st.body, field: field}
	switch {
	case errors.Is(se.Err, io.ErrUnexpectedEOF):
		// The library's offset is where the cut token starts; Decode
		// reports what the end of input cuts.
		return w.run(len(st.body), true)
	case errors.Is(se.Err, jsontext.ErrDuplicateName):
		if f := w.run(off, false); w.early {
			return f
		}
		key := keyField([]byte(se.JSONPointer.LastToken()))
		if len(w.stack) <= 1 {
			return &FieldError{Field: key, Reason: "duplicate key at offset " + strconv.Itoa(off)}
		}
		return &FieldError{Field: key, Reason: "duplicate key in " + field + " at offset " + strconv.Itoa(off)}
	}
	return w.run(off, false)
}

// firstFault reports the first \u0000 escape or excessive nesting in
// body[:end], which the library accepted.
func (st *jsonv2State) firstFault(end int, field string) *FieldError {
	w := walker{body: st.body, field: field}
	if f := w.run(end, false); w.early {
		return f
	}
	return nil
}

func unexpectedAt(body []byte, field string, pos int, want string) *FieldError {
	return &FieldError{Field: field, Reason: unexpectedWhy(body, pos, want) + " at offset " + strconv.Itoa(pos)}
}

// unexpectedWhy says what is at body[pos] where want was expected.
func unexpectedWhy(body []byte, pos int, want string) string {
	if pos >= len(body) {
		return "unexpected end of input, expected " + want
	}
	c := body[pos]
	if c > ' ' && c < 0x7f {
		return "invalid character " + strconv.QuoteRune(rune(c)) + ", expected " + want
	}
	return "invalid character byte 0x" + strconv.FormatUint(uint64(c), 16) + ", expected " + want
}

// walker re-reads a body that the library found well-formed up to limit
// and words the fault at limit as Decode does. On the way it reports the
// faults the library does not look for (\u0000 escapes, nesting beyond
// MaxDepth), which come first when they come earlier in the body. It
// trusts the library for everything before limit, so it is a grammar
// automaton, not a validator.
type walker struct {
	body  []byte
	field string // the top-level key whose value is at fault
	stack []byte // open containers: '{' or '['
	phase uint8
	early bool // the walk found a fault before its limit
}

const (
	wantValue uint8 = iota
	wantKey
	wantColon
	wantNext // ',' or the end of the open container
)

// at attributes a fault to the current top-level value, or to the body
// between values.
func (w *walker) at(pos int, why string) *FieldError {
	f := FieldBody
	if len(w.stack) > 1 || (len(w.stack) == 1 && w.phase == wantValue) {
		f = w.field
	}
	return &FieldError{Field: f, Reason: why + " at offset " + strconv.Itoa(pos)}
}

// fail records that the walk found f before its limit.
func (w *walker) fail(f *FieldError) *FieldError {
	w.early = true
	return f
}

func (w *walker) want() string {
	switch w.phase {
	case wantNext:
		if len(w.stack) > 0 && w.stack[len(w.stack)-1] == '[' {
			return "',' or ']'"
		}
		return "',' or '}'"
	case wantKey:
		return "a string key"
	case wantColon:
		return "':'"
	}
	return "a value"
}

func (w *walker) unexpected(pos int) *FieldError {
	return w.at(pos, unexpectedWhy(w.body, pos, w.want()))
}

// run walks body[:limit]; eof says the library ran out of input there.
// The library does not always stop at the first fault in the order Decode
// reads (it reads a whole value before checking that an object name is a
// string, for one), so run checks each token against the grammar too.
func (w *walker) run(limit int, eof bool) *FieldError {
	body := w.body
	i := 0
	empty := false // the open container has just been opened
	for i < limit {
		c := body[i]
		if isSpace(c) {
			i++
			continue
		}
		closing := (c == '}' || c == ']') && len(w.stack) > 0 && w.stack[len(w.stack)-1] == c-2 // '{'+2 == '}', '['+2 == ']'
		switch {
		case closing && (w.phase == wantNext || empty):
			w.stack = w.stack[:len(w.stack)-1]
			w.phase = wantNext
			i++
		case c == ':' && w.phase == wantColon:
			w.phase = wantValue
			i++
		case c == ',' && w.phase == wantNext && len(w.stack) > 0:
			w.phase = wantValue
			if w.stack[len(w.stack)-1] == '{' {
				w.phase = wantKey
			}
			i++
		case c == '"' && (w.phase == wantKey || w.phase == wantValue):
			j, f := w.str(i, limit, eof)
			if f != nil {
				return f // str sets early
			}
			i = j
			if w.phase == wantKey {
				w.phase = wantColon
			} else {
				w.phase = wantNext
			}
		case w.phase != wantValue:
			return w.fail(w.unexpected(i))
		case c == '{' || c == '[':
			w.stack = append(w.stack, c)
			if len(w.stack) > MaxDepth {
				return w.fail(w.at(i, "nesting deeper than "+strconv.Itoa(MaxDepth)+" levels"))
			}
			w.phase = wantValue
			if c == '{' {
				w.phase = wantKey
			}
			i++
			empty = true
			continue
		case c == '-' || isDigit(c):
			j, complete := number(body[:limit], i)
			if !complete {
				return w.fail(w.at(j, unexpectedWhy(body, j, "a digit")))
			}
			i = j
			w.phase = wantNext
		case c == 't' || c == 'f' || c == 'n':
			lit := "null"
			switch c {
			case 't':
				lit = "true"
			case 'f':
				lit = "false"
			}
			if limit-i < len(lit) || string(body[i:i+len(lit)]) != lit {
				return w.fail(w.at(i, "invalid literal, expected "+lit))
			}
			i += len(lit)
			w.phase = wantNext
		default:
			return w.fail(w.unexpected(i))
		}
		empty = false
	}
	// When the token after a delimiter is wrong, the library points at
	// the delimiter; Decode points at the token.
	if !eof && limit < len(body) && (w.phase == wantNext && body[limit] == ',' || w.phase == wantColon && body[limit] == ':') {
		w.phase = wantValue
		if body[limit] == ',' && w.stack[len(w.stack)-1] == '{' {
			w.phase = wantKey
		}
		for limit++; limit < len(body) && isSpace(body[limit]); limit++ {
		}
	}
	return w.unexpected(limit)
}

// str walks the string whose quote is at body[i] and returns the offset
// after it, or the fault inside it.
func (w *walker) str(i, limit int, eof bool) (int, *FieldError) {
	body := w.body
	for j := i + 1; j < limit; {
		switch c := body[j]; {
		case c == '"':
			return j + 1, nil
		case c == '\\':
			n, why := escapeAt(body, j)
			if why != "" {
				return 0, w.fail(w.at(j, why))
			}
			j += n
		case c == 0:
			return 0, w.fail(w.at(j, "raw NUL byte in string"))
		case c < 0x20:
			return 0, w.fail(w.at(j, "raw control character in string"))
		case c < utf8.RuneSelf:
			j++
		default:
			r, size := utf8.DecodeRune(body[j:])
			if r == utf8.RuneError && size == 1 {
				return 0, w.fail(w.at(j, "invalid UTF-8"))
			}
			j += size
		}
	}
	if eof || limit >= len(body) {
		return 0, w.at(i, "unterminated string")
	}
	// The library stopped at body[limit], inside this string.
	switch c := body[limit]; {
	case c == '\\':
		if _, why := escapeAt(body, limit); why != "" {
			return 0, w.at(limit, why)
		}
	case c == 0:
		return 0, w.at(limit, "raw NUL byte in string")
	case c < 0x20:
		return 0, w.at(limit, "raw control character in string")
	}
	return 0, w.at(limit, "invalid UTF-8")
}

const nulEscape = `\u0000 (NUL) is not allowed in strings`

// escapeAt returns the length of the escape sequence whose backslash is
// at body[i], or why it is refused.
func escapeAt(body []byte, i int) (int, string) {
	if i+1 >= len(body) {
		return 0, "unterminated string"
	}
	switch body[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2, ""
	case 'u':
	default:
		return 0, "invalid escape sequence"
	}
	r, ok := hex4(body, i+2)
	switch {
	case !ok:
		return 0, `invalid \u escape`
	case r == 0:
		return 0, nulEscape
	case r >= 0xdc00 && r <= 0xdfff:
		return 0, "lone UTF-16 low surrogate escape"
	case r >= 0xd800 && r < 0xdc00:
		if i+7 < len(body) && body[i+6] == '\\' && body[i+7] == 'u' {
			if r2, ok := hex4(body, i+8); ok && r2 >= 0xdc00 && r2 <= 0xdfff {
				return 12, ""
			}
		}
		return 0, "lone UTF-16 high surrogate escape"
	}
	return 6, ""
}

// number returns the end of the longest number prefix of b[i:] and
// whether that prefix is a complete number.
func number(b []byte, i int) (int, bool) {
	digits := func(i int) (int, bool) {
		j := i
		for j < len(b) && isDigit(b[j]) {
			j++
		}
		return j, j > i
	}
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	default:
		var ok bool
		if i, ok = digits(i); !ok {
			return i, false
		}
	}
	if i < len(b) && b[i] == '.' {
		var ok bool
		if i, ok = digits(i + 1); !ok {
			return i, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		var ok bool
		if i, ok = digits(i); !ok {
			return i, false
		}
	}
	return i, true
}

// FuzzJSONv2Agrees runs Decode and decodeJSONv2 on the same bodies: they
// must accept the same ones with the same envelope, and refuse the others
// with the same error. Its name does not start with FuzzDecode, so that
// `make fuzz` (-fuzz=FuzzDecode) still matches one target.
func FuzzJSONv2Agrees(f *testing.F) {
	for _, s := range append(decodeSeeds(), faultOrderBodies()...) {
		f.Add([]byte(s))
	}
	for _, body := range decodeCorpus(f) {
		f.Add(body)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		want, wantErr := Decode(body, 0)
		got, err := decodeJSONv2(body, 0)
		if wantErr != nil {
			require.Error(t, err, "Decode refused (%v), decodeJSONv2 accepted %q", wantErr, body)
			require.Equal(t, wantErr.Error(), err.Error(), "body %q", body)
			require.Equal(t, errors.Is(wantErr, ErrTooLarge), errors.Is(err, ErrTooLarge))
			return
		}
		require.NoError(t, err, "Decode accepted, decodeJSONv2 refused %q", body)
		requireSameEnvelope(t, want, got)
		require.Equal(t, len(got.Payload), cap(got.Payload), "the payload's capacity is capped")
	})
}

// faultOrderBodies have several faults each, some that the library finds
// and some that decodeJSONv2 adds: both decoders must report the first
// in the body's order.
func faultOrderBodies() []string {
	deep := nest(MaxDepth, "")
	return []string{
		withPayload(`{"a":"\u0000","b":1,"b":2}`),
		withPayload(`{"b":1,"b":2,"a":"\u0000"}`),
		withPayload(`{"a":"\u0000","b":"` + "\xff" + `"}`),
		withPayload(`{"a":"` + "\xff" + `","b":"\u0000"}`),
		withPayload(`{"a":` + deep + `,"b":1,"b":2}`),
		withPayload(`{"a":` + deep + `,"b":tru}`),
		withPayload(`{"a":` + strings.Repeat("[", 70)),
		withPayload(`{"a":` + strings.Repeat("[", 70) + `"\u0000`),
		withPayload(`{"a":[` + strings.Repeat(`"\\u0000",`, 3) + `"\\\u0000"]}`),
		withID(`["\u0000"]`),
		withID(`{"a":1,"a":2}`),
		withID(deep),
		withName(`"\u0000"`),
		`{"event_id\u0000":1,"event_id":2}`,
		`{"payload":{"a":"\u0000"},"payload":1}`,
		`{"payload":` + deep + `}`,
		`{"payload":{"a":1}` + strings.Repeat(" ", 10) + `,}`,
		`{"payload":{"a":"x\`,
		`{"payload":{"a":"\ud800\u`,
		"{\"payload\":{\"a\":\"\xe4\xb8",
		`{"payload":{"a":-`,
		`{"payload":{"a":1.5e`,
		`{"payload":{"a":nul`,
		`{"payload":{"a":[1 2]}}`,
		`{"payload":{"a":[1,]}}`,
		`{"payload":{"a"::1}}`,
		`{"payload":{"a",1}}`,
		`{"payload":{,}}`,
		`{"payload":[}`,
		`{"event_id"}`,
		` {"event_id":`,
		`]`,
		` } `,
	}
}

func TestJSONv2AgreesOnFaultOrder(t *testing.T) {
	t.Parallel()
	for _, s := range faultOrderBodies() {
		body := []byte(s)
		_, wantErr := Decode(body, 0)
		_, err := decodeJSONv2(body, 0)
		require.Error(t, wantErr, "%q", body)
		require.Error(t, err, "%q", body)
		require.Equal(t, wantErr.Error(), err.Error(), "%q", body)
	}
}

// headToHeadBodies are the bodies of BenchmarkDecodeHeadToHead: the shop's
// events as the demo and the bench send them (the shop's own package, examples/shop),
// bodies near DefaultMaxBodyBytes, and refused bodies of each kind of
// fault. The key of each is its sub-benchmark name.
func headToHeadBodies(tb testing.TB) []struct {
	name string
	body []byte
} {
	type line struct {
		ProductID string `json:"product_id"`
		Quantity  string `json:"quantity"`
	}
	type placed struct {
		OrderID    string `json:"order_id"`
		CustomerID string `json:"customer_id"`
		Lines      []line `json:"lines"`
	}
	type statusChanged struct {
		OrderID string `json:"order_id"`
		Status  string `json:"status"`
		Version int32  `json:"version"`
	}
	id := func(i int) string { return fmt.Sprintf("0190a5d1-6f5e-7c3a-9b2d-%012x", i) }
	at := time.Date(2026, 11, 30, 9, 41, 7, 123456789, time.UTC)
	encode := func(name string, payload any) []byte {
		raw, err := json.Marshal(payload)
		require.NoError(tb, err)
		body, err := Encode(Envelope{EventID: uuid.MustParse(id(1)), EventName: name, OccurredAt: at, Payload: raw})
		require.NoError(tb, err)
		return body
	}
	order := func(lines int) []byte {
		p := placed{OrderID: id(2), CustomerID: id(3)}
		for i := range lines {
			p.Lines = append(p.Lines, line{ProductID: id(10 + i), Quantity: strconv.Itoa(i+1) + ".000"})
		}
		return encode("order.order.placed.v1", p)
	}
	fill := func(item func(i int) string) string {
		var sb strings.Builder
		for i := 0; sb.Len() < DefaultMaxBodyBytes-300; i++ {
			if i > 0 {
				sb.WriteString(",")
			}
			sb.WriteString(item(i))
		}
		return sb.String()
	}
	bodies := []struct {
		name string
		body []byte
	}{
		{"order-placed-1-line", order(1)},
		{"order-placed-3-lines", order(3)},
		{"order-placed-5-lines", order(5)},
		{"status-changed", encode("order.order.status_changed.v1", statusChanged{OrderID: id(2), Status: "shipped", Version: 3})},
		{"large-many-small-objects", []byte(withPayload(`{"a":[` + fill(func(i int) string { return fmt.Sprintf(`{"id":%d,"name":"n%d","ok":true}`, i, i) }) + `]}`))},
		{"large-many-keys", []byte(withPayload("{" + fill(func(i int) string { return fmt.Sprintf(`"k%d":%d`, i, i) }) + "}"))},
		{"large-long-string", []byte(withPayload(`{"s":"` + strings.Repeat("abcdefgh", (DefaultMaxBodyBytes-300)/8) + `"}`))},
		{"large-escapes-unicode", []byte(withPayload(`{"s":"` + strings.Repeat(`\u00e9é\n`, (DefaultMaxBodyBytes-300)/10) + `"}`))},
		{"bad-duplicate-key", []byte(withPayload(`{"order_id":"A-1","lines":[{"q":1,"q":2}]}`))},
		{"bad-nul-escape", []byte(withPayload(`{"order_id":"A-1\u0000"}`))},
		{"bad-too-deep", []byte(withPayload(`{"a":` + nest(MaxDepth, "1") + `}`))},
		{"bad-invalid-utf8", []byte(withPayload("{\"note\":\"caf\xe9\"}"))},
		{"bad-nil-uuid", []byte(withID(q("00000000-0000-0000-0000-000000000000")))},
		{"bad-unknown-key", []byte(strings.TrimSuffix(good().body(), "}") + `,"extra":1}`)},
		{"bad-truncated", []byte(good().body()[:200])},
		{"bad-trailing-data", []byte(good().body() + `{}`)},
	}
	for _, b := range bodies {
		require.LessOrEqual(tb, len(b.body), DefaultMaxBodyBytes, b.name)
		_, err := Decode(b.body, 0)
		require.Equal(tb, strings.HasPrefix(b.name, "bad-"), err != nil, "%s: %v", b.name, err)
	}
	return bodies
}

// BenchmarkDecodeHeadToHead measures Decode against decodeJSONv2, the same
// contract on encoding/json/v2, body by body. Sub-benchmarks are named
// body=.../impl=..., so that `benchstat -col /impl` puts them side by side
// (scan.go has the figures and the decision they carry). For accepted
// bodies, impl=v2-unmarshal-floor is what the library's own struct
// decoding costs with json.RejectUnknownMembers and none of the
// envelope's checks: a floor under any Unmarshal-based decoder.
func BenchmarkDecodeHeadToHead(b *testing.B) {
	var floor struct {
		EventID    jsontext.Value `json:"event_id"`
		EventName  jsontext.Value `json:"event_name"`
		OccurredAt jsontext.Value `json:"occurred_at"`
		Payload    jsontext.Value `json:"payload"`
	}
	reject := jsonv2.RejectUnknownMembers(true)
	for _, tc := range headToHeadBodies(b) {
		bad := strings.HasPrefix(tc.name, "bad-")
		for _, d := range decoders {
			b.Run("body="+tc.name+"/impl="+d.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(tc.body)))
				defer reportCPU(b)()
				for b.Loop() {
					if _, err := d.decode(tc.body, 0); (err != nil) != bad {
						b.Fatal(err)
					}
				}
			})
		}
		if bad {
			continue
		}
		b.Run("body="+tc.name+"/impl=v2-unmarshal-floor", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(tc.body)))
			defer reportCPU(b)()
			for b.Loop() {
				if err := jsonv2.Unmarshal(tc.body, &floor, reject); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// reportCPU starts measuring the process's CPU time; the function it
// returns reports it per operation as cpu-ns/op, the figure to compare on
// a loaded machine.
func reportCPU(b *testing.B) func() {
	start := procstat.Self()
	return func() {
		if end := procstat.Self(); start > 0 && b.N > 0 {
			b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
		}
	}
}
