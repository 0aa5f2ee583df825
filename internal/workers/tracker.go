package workers

import (
	"slices"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// tracker settles the deliveries of one channel that several workers
// share (a partitioned pool's reader channel). A multiple ack there would
// cover other workers' deliveries, so each worker settles through a view
// of the tracker: its acks mark its own deliveries settled, and the
// tracker sends one real multiple ack up to the highest tag below which
// every delivery of the channel is settled (the watermark). Nacks go out
// at once, one delivery each. Safe for concurrent use.
type tracker struct {
	ch acker

	mu     sync.Mutex
	out    [][]uint64          // per worker: tags handed to it, not settled, ascending
	done   map[uint64]struct{} // settled tags above the watermark
	next   uint64              // lowest tag not known settled
	failed bool                // an ack or nack failed: the channel is gone
}

// newTracker returns the tracker of a fresh channel (delivery tags start at
// 1) shared by workers workers.
func newTracker(ch acker, workers int) *tracker {
	return &tracker{ch: ch, out: make([][]uint64, workers), done: map[uint64]struct{}{}, next: 1}
}

// dispatched records that the delivery tagged tag went to worker w.
func (t *tracker) dispatched(w int, tag uint64) {
	t.mu.Lock()
	t.out[w] = append(t.out[w], tag)
	t.mu.Unlock()
}

// dead reports whether an ack or a nack on the channel failed.
func (t *tracker) dead() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

// view returns worker w's acker on the shared channel.
func (t *tracker) view(w int) acker { return trackerView{t: t, w: w} }

// settle marks tags settled and sends the multiple ack the watermark
// allows, if it moved. Callers hold t.mu.
func (t *tracker) settle(tags ...uint64) error {
	for _, tag := range tags {
		t.done[tag] = struct{}{}
	}
	acked := t.next - 1
	for {
		if _, ok := t.done[t.next]; !ok {
			break
		}
		delete(t.done, t.next)
		t.next++
	}
	if t.next-1 == acked {
		return nil
	}
	if err := t.ch.Ack(t.next-1, true); err != nil {
		t.failed = true
		return err
	}
	return nil
}

// trackerView is one worker's acker on a tracker's channel.
type trackerView struct {
	t *tracker
	w int
}

// Ack settles the worker's deliveries up to tag (only tag itself unless
// multiple).
func (v trackerView) Ack(tag uint64, multiple bool) error {
	t := v.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failed {
		return amqp.ErrClosed
	}
	out := t.out[v.w]
	if !multiple {
		i := slices.Index(out, tag)
		if i < 0 {
			return nil
		}
		t.out[v.w] = slices.Delete(out, i, i+1)
		return t.settle(tag)
	}
	n := 0
	for n < len(out) && out[n] <= tag {
		n++
	}
	settled := out[:n]
	t.out[v.w] = out[n:]
	return t.settle(settled...)
}

// Nack sends a nack of tag alone (multiple is ignored: a multiple nack
// would cross workers too) and counts it settled for the watermark.
func (v trackerView) Nack(tag uint64, _ bool, requeue bool) error {
	t := v.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failed {
		return amqp.ErrClosed
	}
	if i := slices.Index(t.out[v.w], tag); i >= 0 {
		t.out[v.w] = slices.Delete(t.out[v.w], i, i+1)
	}
	if err := t.ch.Nack(tag, false, requeue); err != nil {
		t.failed = true
		return err
	}
	return t.settle(tag)
}

// IsClosed reports whether the shared channel is gone.
func (v trackerView) IsClosed() bool {
	v.t.mu.Lock()
	dead := v.t.failed
	v.t.mu.Unlock()
	return dead || v.t.ch.IsClosed()
}

// resize makes the tracker's workers n, once every worker has settled
// what it was handed (a partitioned pool's reader changing its
// concurrency): false, and no change, while a delivery is outstanding.
// The watermark carries on: tags keep counting on the same channel.
func (t *tracker) resize(n int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, out := range t.out {
		if len(out) > 0 {
			return false
		}
	}
	t.out = make([][]uint64, n)
	return true
}
