package envelope

import (
	"encoding/json"
	"errors"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Envelope is one decoded event envelope.
type Envelope struct {
	// EventID is the producer-set deduplication key.
	EventID uuid.UUID
	// EventName is the event type, e.g. "order.order.placed.v1".
	EventName string
	// OccurredAt is when the event happened, with the producer's offset.
	OccurredAt time.Time
	// Payload is the raw JSON object, bytes exactly as received. From
	// Decode it is a sub-slice of the body, not a copy, with its capacity
	// capped at its end so that an append reallocates instead of writing
	// into the rest of the body. It is valid while the body is unchanged.
	Payload json.RawMessage
}

// DefaultMaxBodyBytes is the body size limit Decode applies when its
// maxBytes argument is zero or negative; Encode refuses to produce a larger
// body.
const DefaultMaxBodyBytes = 1 << 20

// MaxDepth is the maximum nesting of objects and arrays in a body, counting
// the envelope object itself as level 1 (so the payload object is level 2).
const MaxDepth = 64

// MaxEventNameBytes is the maximum length of event_name in bytes.
const MaxEventNameBytes = 255

// Field names used in FieldError.Field besides the key of an unknown or
// duplicate key.
const (
	// FieldBody designates the body as a whole: size, encoding, syntax of
	// the envelope object, trailing data.
	FieldBody = "body"
	// FieldEventID designates the event_id value.
	FieldEventID = "event_id"
	// FieldEventName designates the event_name value.
	FieldEventName = "event_name"
	// FieldOccurredAt designates the occurred_at value.
	FieldOccurredAt = "occurred_at"
	// FieldPayload designates the payload value.
	FieldPayload = "payload"
)

// ErrTooLarge is wrapped by the *FieldError returned when a body exceeds
// the size limit; test for it with errors.Is.
var ErrTooLarge = errors.New("envelope: body too large")

// FieldError reports why a body (Decode) or an Envelope (Encode) was
// refused. Field names the field at fault: "event_id", "event_name",
// "occurred_at", "payload", "body", or the key for an unknown or duplicate
// key.
type FieldError struct {
	// Field is the field at fault.
	Field string
	// Reason says what is wrong with it.
	Reason string

	err error // wrapped sentinel, e.g. ErrTooLarge
}

// Error returns "envelope: <field>: <reason>". A Field that is not a plain
// printable token (possible for an unknown key) is quoted.
func (e *FieldError) Error() string {
	return "envelope: " + quoteField(e.Field) + ": " + e.Reason
}

// Unwrap returns the sentinel error wrapped by e (ErrTooLarge), or nil.
func (e *FieldError) Unwrap() error { return e.err }

func quoteField(f string) string {
	if f == "" {
		return `""`
	}
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c <= ' ' || c >= 0x7f || c == ':' || c == '"' || c == '\\' {
			return strconv.Quote(f)
		}
	}
	return f
}

// maxFieldLen bounds the length of an unknown or duplicate key copied into
// FieldError.Field.
const maxFieldLen = 64

// keyField turns a (possibly huge, already validated UTF-8) key into a
// FieldError.Field, truncating it on a rune boundary.
func keyField(key []byte) string {
	if len(key) <= maxFieldLen {
		return string(key)
	}
	n := maxFieldLen
	for n > 0 && !utf8.RuneStart(key[n]) {
		n--
	}
	return string(key[:n]) + "..."
}

// Decode parses and validates one envelope body. maxBytes <= 0 means
// DefaultMaxBodyBytes. Any error is a *FieldError; a body over the limit is
// refused before any parsing with an error wrapping ErrTooLarge. The
// returned Payload is a sub-slice of body, not a copy (see Envelope.Payload):
// body must not change while the envelope is in use. Decode retains
// nothing of body once it returns and is safe for concurrent use.
func Decode(body []byte, maxBytes int) (Envelope, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBodyBytes
	}
	if len(body) == 0 {
		return Envelope{}, &FieldError{Field: FieldBody, Reason: "empty body"}
	}
	if len(body) > maxBytes {
		return Envelope{}, tooLarge(len(body), maxBytes)
	}
	s := getScanner(body)
	env, err := s.decodeEnvelope()
	putScanner(s)
	if err != nil {
		return Envelope{}, err
	}
	return env, nil
}

func tooLarge(n, limit int) *FieldError {
	return &FieldError{
		Field:  FieldBody,
		Reason: "body of " + strconv.Itoa(n) + " bytes exceeds the limit of " + strconv.Itoa(limit) + " bytes",
		err:    ErrTooLarge,
	}
}

// Encode validates e with the same rules as Decode and writes it as an
// envelope body: the keys event_id, event_name, occurred_at and payload in
// that order, occurred_at in time.RFC3339Nano with its zone offset, and the
// payload bytes as given. Decode(Encode(e)) returns an Envelope equal to e
// (OccurredAt Equal and with the same offset). Any error is a *FieldError.
func Encode(e Envelope) ([]byte, error) {
	if err := checkUUID(e.EventID); err != nil {
		return nil, err
	}
	if !utf8.ValidString(e.EventName) {
		return nil, &FieldError{Field: FieldEventName, Reason: "invalid UTF-8"}
	}
	if err := checkEventName(e.EventName); err != nil {
		return nil, err
	}

	// occurred_at: format, then make sure the text parses back to the same
	// instant and offset (this refuses years outside 0000-9999 and offsets
	// that are not whole minutes or not below 24h).
	var tbuf [64]byte
	ts := e.OccurredAt.AppendFormat(tbuf[:0], time.RFC3339Nano)
	back, ferr := parseOccurredAt(ts)
	if ferr != nil {
		return nil, &FieldError{Field: FieldOccurredAt, Reason: "not representable in RFC 3339: " + ferr.Reason}
	}
	_, off := e.OccurredAt.Zone()
	if _, boff := back.Zone(); !back.Equal(e.OccurredAt) || boff != off {
		return nil, &FieldError{Field: FieldOccurredAt, Reason: "not representable in RFC 3339 without loss: " + strconv.Quote(string(ts))}
	}

	if err := validatePayload(e.Payload); err != nil {
		return nil, err
	}

	size := len(`{"event_id":"","event_name":"","occurred_at":"","payload":}`) +
		36 + len(e.EventName) + 2*countQuoteBackslash(e.EventName) + len(ts) + len(e.Payload)
	if size > DefaultMaxBodyBytes {
		return nil, tooLarge(size, DefaultMaxBodyBytes)
	}
	out := make([]byte, 0, size)
	out = append(out, `{"event_id":"`...)
	var idbuf [36]byte
	uuidHex(&idbuf, e.EventID)
	out = append(out, idbuf[:]...)
	out = append(out, `","event_name":"`...)
	out = appendEscaped(out, e.EventName)
	out = append(out, `","occurred_at":"`...)
	out = append(out, ts...)
	out = append(out, `","payload":`...)
	out = append(out, e.Payload...)
	out = append(out, '}')
	return out, nil
}

// validatePayload checks that p is exactly one JSON object (no surrounding
// whitespace, so that Decode returns the same bytes) obeying the rules of
// Decode, nested inside the envelope.
func validatePayload(p []byte) *FieldError {
	if len(p) == 0 {
		return &FieldError{Field: FieldPayload, Reason: "required"}
	}
	if p[0] != '{' {
		if isSpace(p[0]) {
			return &FieldError{Field: FieldPayload, Reason: "must not have leading whitespace"}
		}
		return &FieldError{Field: FieldPayload, Reason: "must be a JSON object, got " + kindOf(p[0])}
	}
	s := getScanner(p)
	defer putScanner(s)
	s.field = FieldPayload
	if err := s.parseObject(2); err != nil {
		return err
	}
	if s.pos != len(p) {
		return &FieldError{Field: FieldPayload, Reason: "unexpected data after the JSON object at offset " + strconv.Itoa(s.pos)}
	}
	return nil
}

// countQuoteBackslash counts the bytes of s that appendEscaped escapes.
func countQuoteBackslash(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			n++
		}
	}
	return n
}

// appendEscaped appends s as JSON string content. s is a validated event
// name: valid UTF-8 without control characters, so only '"' and '\\' need
// escaping.
func appendEscaped(dst []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', c)
			start = i + 1
		}
	}
	return append(dst, s[start:]...)
}

// EventTime is the time platformd judges an event's age by (the
// beyond-horizon guard, duplicate ages, replays): the timestamp of a UUID
// v7 event_id, which the producer set when it wrote its outbox row, else
// occurred_at.
func EventTime(id uuid.UUID, occurredAt time.Time) time.Time {
	if id.Version() == 7 {
		sec, nsec := id.Time().UnixTime()
		return time.Unix(sec, nsec)
	}
	return occurredAt
}
