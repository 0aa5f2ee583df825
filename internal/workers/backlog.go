package workers

import "time"

// WorkingWindowDefault is how recently a pool must have finished a batch
// to count as working (Working), or twice its batch.wait if that is
// longer: more than the gap between two batches of a busy pool, which is
// at most its batch.wait.
const WorkingWindowDefault = 100 * time.Millisecond

// AtFullSpeed reports whether the pool consumes as fast as it can: a
// worker on a live consumer, not paused, no rate limit in force, and its
// database answering. Messages ready in the queue of such a pool are a
// backlog it cannot keep up with; for any other pool they are held back
// on purpose (a pause, a rate limit) or by a fault, and background work
// such as a failure retry has no reason to give way to them. Safe for
// concurrent use.
func (p *Pool) AtFullSpeed() bool {
	if p.connected.Load() == 0 || p.lim.Load() != nil || p.dbErr.Load() != nil {
		return false
	}
	paused, _ := p.pauseState()
	return !paused
}

// Working reports whether the pool has deliveries in hand or finished a
// batch within the last WorkingWindowDefault: a pool with a backlog always
// is, so that a look at queues for one can pass over the pools that are
// not (two atomic loads, no broker round trip). Safe for concurrent use.
func (p *Pool) Working() bool {
	if p.inFlight.Load() > 0 {
		return true
	}
	at := p.workedAt.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < max(WorkingWindowDefault, 2*p.cfg.BatchWait)
}
