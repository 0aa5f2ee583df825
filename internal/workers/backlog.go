package workers

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
