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
// before its next attempt is even checked. A success clears its record. It
// is safe for concurrent use.
type loginThrottle struct {
	base, max time.Duration
	now       func() time.Time

	mu      sync.Mutex
	clients map[string]*throttleEntry
}

type throttleEntry struct {
	failures int
	until    time.Time
}

func newLoginThrottle(base, maxWait time.Duration, now func() time.Time) *loginThrottle {
	return &loginThrottle{base: base, max: maxWait, now: now, clients: map[string]*throttleEntry{}}
}

// wait returns how long client must still wait before an attempt; zero
// when it may try now.
func (lt *loginThrottle) wait(client string) time.Duration {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	e, ok := lt.clients[client]
	if !ok {
		return 0
	}
	return max(0, e.until.Sub(lt.now()))
}

// fail records a failed attempt of client and returns its failure count
// and the wait it now has.
func (lt *loginThrottle) fail(client string) (int, time.Duration) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	now := lt.now()
	e, ok := lt.clients[client]
	if !ok {
		lt.makeRoom(now)
		e = &throttleEntry{}
		lt.clients[client] = e
	}
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
