package chaos

import (
	"encoding/binary"
	"testing"
)

// pgMessage frames body as a server message of type typ.
func pgMessage(typ byte, body []byte) []byte {
	m := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(m[1:], uint32(4+len(body)))
	return append(m, body...)
}

// eventIDRow is a DataRow of one binary uuid column.
func eventIDRow() []byte {
	body := []byte{0, 1, 0, 0, 0, 16}
	return pgMessage('D', append(body, make([]byte, 16)...))
}

// TestPgFramerAcrossChunks: the commit cut finds the dedup insert's
// returned id wherever the server's reads split its messages, and does not
// take another row for one.
func TestPgFramerAcrossChunks(t *testing.T) {
	stream := append(pgMessage('1', nil), pgMessage('2', nil)...)
	stream = append(stream, pgMessage('D', []byte{0, 2, 0, 0, 0, 1, 'x', 0, 0, 0, 1, 'y'})...)
	stream = append(stream, eventIDRow()...)
	stream = append(stream, pgMessage('C', []byte("INSERT 0 1\x00"))...)
	for split := 0; split <= len(stream); split++ {
		var f pgFramer
		var types []byte
		rows := 0
		fn := func(typ byte, body []byte) {
			types = append(types, typ)
			if isEventIDRow(typ, body) {
				rows++
			}
		}
		f.feed(stream[:split], fn)
		f.feed(stream[split:], fn)
		if string(types) != "12DDC" || rows != 1 {
			t.Fatalf("split at %d: messages %q, event id rows %d; want \"12DDC\", 1", split, types, rows)
		}
	}
	var f pgFramer
	calls := 0
	f.feed([]byte{'N', 0, 0, 0, 1}, func(byte, []byte) { calls++ })
	f.feed(eventIDRow(), func(byte, []byte) { calls++ })
	if calls != 0 || !f.broken {
		t.Fatalf("after a length no message has: %d calls, broken %v; want 0, true", calls, f.broken)
	}
}
