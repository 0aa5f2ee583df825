package workers

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPartitionKeyFindsTheValueAtThePointer(t *testing.T) {
	t.Parallel()
	env := func(payload string) []byte {
		return []byte(`{"event_id":"0190b4b6-6f5a-7b3c-8d2e-1f2a3b4c5d6e","event_name":"x","occurred_at":"2026-01-01T00:00:00Z","payload":` + payload + `}`)
	}
	k := newPartitionKey("/order_id")
	a, ok := k.hash(env(`{"order_id":"a1","status":"x"}`))
	require.True(t, ok)
	b, ok := k.hash(env(`{"status":"y","order_id":"a1"}`))
	require.True(t, ok)
	require.Equal(t, a, b, "the key's value decides, not its place in the payload")
	c, ok := k.hash(env(`{"order_id":"\u0061\u0031"}`))
	require.True(t, ok)
	require.Equal(t, a, c, "a string is hashed unquoted: its escapes do not matter")
	d, ok := k.hash(env(`{"order_id":"a2"}`))
	require.True(t, ok)
	require.NotEqual(t, a, d)

	for name, body := range map[string][]byte{
		"no such member":        env(`{"status":"x"}`),
		"payload not an object": env(`[1,2]`),
		"not JSON":              []byte(`{"payload":`),
		"no payload":            []byte(`{"event_id":"x"}`),
	} {
		_, ok := k.hash(body)
		require.False(t, ok, name)
	}

	nested := newPartitionKey("/order/lines/1/sku")
	n1, ok := nested.hash(env(`{"order":{"lines":[{"sku":"a"},{"sku":"b"}]}}`))
	require.True(t, ok)
	n2, ok := newPartitionKey("/sku").hash(env(`{"sku":"b"}`))
	require.True(t, ok)
	require.Equal(t, n2, n1, "objects and array indexes are walked")
	_, ok = nested.hash(env(`{"order":{"lines":[{"sku":"a"}]}}`))
	require.False(t, ok, "an index past the end")
	_, ok = newPartitionKey("/order/lines/01").hash(env(`{"order":{"lines":[1,2]}}`))
	require.False(t, ok, "a leading zero is not an index")
	esc, ok := newPartitionKey("/a~1b/c~0d").hash(env(`{"a/b":{"c~d":7}}`))
	require.True(t, ok)
	seven, ok := newPartitionKey("/n").hash(env(`{"n":7}`))
	require.True(t, ok)
	require.Equal(t, seven, esc, "~1 and ~0 escape / and ~")
}

func TestTrackerAcksOnlyUpToTheWatermark(t *testing.T) {
	t.Parallel()
	ch := &fakeChannel{}
	trk := newTracker(ch, 2)
	a, b := trk.view(0), trk.view(1)
	// Dispatch in delivery order: 1 and 3 to worker 0, 2, 4 and 5 to 1.
	for _, d := range []struct {
		tag uint64
		w   int
	}{{1, 0}, {2, 1}, {3, 0}, {4, 1}, {5, 1}} {
		trk.dispatched(d.w, d.tag)
	}
	require.NoError(t, b.Ack(4, true))
	require.Empty(t, ch.ops, "worker 1's acks of 2 and 4 wait for 1, worker 0's")
	require.NoError(t, a.Ack(1, true))
	require.Equal(t, []string{"ack 2 multiple=true"}, ch.ops, "1 and 2 are settled; 3 is not")
	require.NoError(t, b.Nack(5, false, true))
	require.Equal(t, "nack 5 multiple=false requeue=true", ch.ops[1], "a nack goes out at once, alone")
	require.NoError(t, a.Ack(3, true))
	require.Equal(t, "ack 5 multiple=true", ch.ops[2], "everything up to 5 is settled (5 nacked)")
	require.Len(t, ch.ops, 3)
}

func TestTrackerReportsTheChannelGone(t *testing.T) {
	t.Parallel()
	ch := &fakeChannel{ackErr: errors.New("channel closed")}
	trk := newTracker(ch, 1)
	trk.dispatched(0, 1)
	v := trk.view(0)
	require.Error(t, v.Ack(1, true))
	require.True(t, trk.dead())
	require.True(t, v.IsClosed())
	require.Error(t, v.Ack(1, true), "no ack is sent on a dead channel")
}
