package startstop

import (
	"cmp"
	"math/rand/v2"
	"time"
)

// Defaults of Backoff: the waits of every retry loop of the daemon after a
// fault (a broker dial, a consumer channel, the control session, a LISTEN,
// a pool's state read, the relay, the replay runner, a service's
// bring-up).
const (
	BackoffMinDefault = 100 * time.Millisecond
	BackoffMaxDefault = 5 * time.Second
)

// Backoff is the wait of a retry loop after a fault: Min after the first,
// doubled after each further one up to Max, each with Jitter so that the
// loops of many pools and daemons that lost the same broker or database do
// not come back in step. The zero value waits BackoffMinDefault doubling
// up to BackoffMaxDefault. A Backoff belongs to one loop: it is not safe
// for concurrent use.
type Backoff struct {
	// Min is the first wait (0: BackoffMinDefault).
	Min time.Duration
	// Max bounds every wait but for its jitter (0: BackoffMaxDefault).
	Max time.Duration

	next time.Duration
}

// Next returns the wait after one more fault in a row.
func (b *Backoff) Next() time.Duration {
	lo, hi := cmp.Or(b.Min, BackoffMinDefault), cmp.Or(b.Max, BackoffMaxDefault)
	d := min(max(b.next, lo), hi)
	b.next = min(2*d, hi)
	return Jitter(d)
}

// Reset makes the next wait Min again: the loop has succeeded.
func (b *Backoff) Reset() { b.next = 0 }

// Jitter returns d plus up to 20% at random, so that the retries of
// several daemons' services do not fall in step.
func Jitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}
