package workers

import (
	"bytes"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"
)

// partitionKey finds a delivery's key: the value at a JSON pointer into its
// envelope's payload (RFC 6901, e.g. "/order_id"). It reuses one decoder
// and is not safe for concurrent use: a pool's reader owns one.
type partitionKey struct {
	path []string // "payload" then the pointer's reference tokens
	r    bytes.Reader
	dec  *jsontext.Decoder
	buf  []byte
}

// newPartitionKey returns the key finder of pointer, which must be valid
// (config checks it); "" is the whole payload.
func newPartitionKey(pointer string) *partitionKey {
	k := &partitionKey{path: []string{"payload"}}
	k.dec = jsontext.NewDecoder(&k.r)
	for tok := range jsontext.Pointer(pointer).Tokens() {
		k.path = append(k.path, tok)
	}
	return k
}

// hash returns the FNV-1a hash of body's key and true, or false when the
// body is not a JSON object holding a value at the key's pointer. A string
// is hashed unquoted (so its escapes do not matter), any other value as
// its JSON text.
func (k *partitionKey) hash(body []byte) (uint64, bool) {
	v, ok := k.bytes(body)
	if !ok {
		return 0, false
	}
	h := uint64(14695981039346656037)
	for _, c := range v {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h, true
}

// text returns body's key as text (a string unquoted, any other value as
// its JSON text), or false when the body holds none: the sequence key of
// an ordered pool's failures.
func (k *partitionKey) text(body []byte) (string, bool) {
	v, ok := k.bytes(body)
	return string(v), ok
}

// bytes returns body's key: a string unquoted, any other value as its
// JSON text. The slice is reused by the next call.
func (k *partitionKey) bytes(body []byte) ([]byte, bool) {
	v, ok := k.lookup(body)
	if !ok {
		return nil, false
	}
	if v.Kind() == '"' {
		var err error
		if k.buf, err = jsontext.AppendUnquote(k.buf[:0], v); err != nil {
			return nil, false
		}
		return k.buf, true
	}
	return v, true
}

// lookup returns the JSON value at the key's path in body.
func (k *partitionKey) lookup(body []byte) (jsontext.Value, bool) {
	k.r.Reset(body)
	k.dec.Reset(&k.r)
	for _, tok := range k.path {
		switch k.dec.PeekKind() {
		case '{':
			if !k.member(tok) {
				return nil, false
			}
		case '[':
			if !k.element(tok) {
				return nil, false
			}
		default:
			return nil, false
		}
	}
	v, err := k.dec.ReadValue()
	if err != nil {
		return nil, false
	}
	return v, true
}

// member moves the decoder, at an object, to the value of member name.
func (k *partitionKey) member(name string) bool {
	if _, err := k.dec.ReadToken(); err != nil {
		return false
	}
	for k.dec.PeekKind() == '"' {
		t, err := k.dec.ReadToken()
		if err != nil {
			return false
		}
		if t.String() == name {
			return true
		}
		if k.dec.SkipValue() != nil {
			return false
		}
	}
	return false
}

// element moves the decoder, at an array, to element index (a reference
// token of digits without leading zeros).
func (k *partitionKey) element(index string) bool {
	if index == "" || (len(index) > 1 && index[0] == '0') {
		return false
	}
	n, err := strconv.Atoi(index)
	if err != nil || n < 0 {
		return false
	}
	if _, err := k.dec.ReadToken(); err != nil {
		return false
	}
	for range n {
		if k.dec.PeekKind() == ']' || k.dec.SkipValue() != nil {
			return false
		}
	}
	return k.dec.PeekKind() != ']'
}
