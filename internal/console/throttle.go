package console

import (
	"sync"
	"time"
)

// throttleClientsMax bounds the clients tracked; past it, entries whose
// wait has ended are dropped first, then the oldest.
const throttleClientsMax = 10_000

// loginThrottle slows down failed sign-ins per client address: after the
// n-th consecutive failure the client must wait base·2^(n-1) (at most max)
// before its next attempt is even checked, and only one attempt of a
// client is checked at a time, so that attempts sent together cannot all
// pass before the first failure is counted. A success clears its record.
// It is safe for concurrent use.
type loginThrottle struct {
	base, max time.Duration
	now       func() time.Time

	mu      sync.Mutex
	clients map[string]*throttleEntry
}

type throttleEntry struct {
	failures int
	until    time.Time
	// checking is when an attempt of this client passed begin, zero once
	// it ended in fail or succeed. One older than checkingMax no longer
	// blocks: the handler that held it cannot lock its client out.
	checking time.Time
}

// checkingMax bounds how long one attempt blocks the next of its client.
const checkingMax = 5 * time.Second

func newLoginThrottle(base, maxWait time.Duration, now func() time.Time) *loginThrottle {
	return &loginThrottle{base: base, max: maxWait, now: now, clients: map[string]*throttleEntry{}}
}

// begin reserves client's next attempt. It returns how long client must
// still wait: zero when the attempt may be checked now, and then no other
// attempt of client is checked until this one ends in fail or succeed
// (one that comes meanwhile is told to wait base).
func (lt *loginThrottle) begin(client string) time.Duration {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	now := lt.now()
	e := lt.entry(client, now)
	if !e.checking.IsZero() && now.Sub(e.checking) < checkingMax {
		return max(lt.base, e.until.Sub(now))
	}
	if wait := e.until.Sub(now); wait > 0 {
		return wait
	}
	e.checking = now
	return 0
}

// entry returns client's record, made when it has none; lt.mu must be held.
func (lt *loginThrottle) entry(client string, now time.Time) *throttleEntry {
	e, ok := lt.clients[client]
	if !ok {
		lt.makeRoom(now)
		e = &throttleEntry{}
		lt.clients[client] = e
	}
	return e
}

// fail records a failed attempt of client, ending the one begin let
// through, and returns its failure count and the wait it now has.
func (lt *loginThrottle) fail(client string) (int, time.Duration) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	now := lt.now()
	e := lt.entry(client, now)
	e.checking = time.Time{}
	if now.Sub(e.until) > lt.max {
		e.failures = 0 // quiet for long enough: forgiven
	}
	e.failures++
	d := lt.max
	if shift := e.failures - 1; shift < 30 {
		d = min(lt.base<<shift, lt.max)
	}
	e.until = now.Add(d)
	return e.failures, d
}

// succeed clears client's record.
func (lt *loginThrottle) succeed(client string) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	delete(lt.clients, client)
}

// makeRoom drops records when the table is full; lt.mu must be held.
// A client whose wait ended long ago (past max) has forgotten its
// failures anyway; counting them further would only lock it out longer.
func (lt *loginThrottle) makeRoom(now time.Time) {
	if len(lt.clients) < throttleClientsMax {
		return
	}
	var oldestKey string
	var oldest time.Time
	for k, e := range lt.clients {
		if now.Sub(e.until) > lt.max {
			delete(lt.clients, k)
			continue
		}
		if oldestKey == "" || e.until.Before(oldest) {
			oldestKey, oldest = k, e.until
		}
	}
	if len(lt.clients) >= throttleClientsMax {
		delete(lt.clients, oldestKey)
	}
}
