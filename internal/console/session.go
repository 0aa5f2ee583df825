package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"sync"
	"time"
)

// sessionsMax bounds the sessions held; past it, signing in evicts the
// session closest to expiry. Sessions exist only after a valid token, so
// this guards memory against a runaway script, not strangers.
const sessionsMax = 10_000

// session is one signed-in operator.
type session struct {
	id      string
	name    string // the token's name: the actor of audited actions
	role    string // admin.RoleRead or admin.RoleAdmin
	csrf    string
	expires time.Time
	flash   string // shown once on the next page
}

// sessionStore keeps sessions in memory: a restart signs everyone out. It
// is safe for concurrent use.
type sessionStore struct {
	ttl time.Duration
	now func() time.Time

	mu       sync.Mutex
	sessions map[string]*session
}

func newSessionStore(ttl time.Duration, now func() time.Time) *sessionStore {
	return &sessionStore{ttl: ttl, now: now, sessions: map[string]*session{}}
}

// randomToken returns 32 random bytes, base64url-encoded.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return base64.RawURLEncoding.EncodeToString(b)
}

// create starts a session for the token name and role.
func (st *sessionStore) create(name, role string) session {
	now := st.now()
	s := &session{id: randomToken(), name: name, role: role, csrf: randomToken(), expires: now.Add(st.ttl)}
	st.mu.Lock()
	defer st.mu.Unlock()
	for id, old := range st.sessions {
		if !now.Before(old.expires) {
			delete(st.sessions, id)
		}
	}
	if len(st.sessions) >= sessionsMax {
		var oldest *session
		for _, old := range st.sessions {
			if oldest == nil || old.expires.Before(oldest.expires) {
				oldest = old
			}
		}
		delete(st.sessions, oldest.id)
	}
	st.sessions[s.id] = s
	return *s
}

// get returns the live session with id; an expired one is removed.
func (st *sessionStore) get(id string) (session, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	s, ok := st.sessions[id]
	if !ok {
		return session{}, false
	}
	if !st.now().Before(s.expires) {
		delete(st.sessions, id)
		return session{}, false
	}
	return *s, true
}

// takeFlash returns and clears the session's flash message.
func (st *sessionStore) takeFlash(id string) string {
	st.mu.Lock()
	defer st.mu.Unlock()
	s, ok := st.sessions[id]
	if !ok {
		return ""
	}
	f := s.flash
	s.flash = ""
	return f
}

// setFlash sets the message shown on the session's next page.
func (st *sessionStore) setFlash(id, msg string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if s, ok := st.sessions[id]; ok {
		s.flash = msg
	}
}

// delete ends the session with id.
func (st *sessionStore) delete(id string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.sessions, id)
}

// validCSRF reports whether presented is s's CSRF token, in constant time.
func (s session) validCSRF(presented string) bool {
	return presented != "" && subtle.ConstantTimeCompare([]byte(presented), []byte(s.csrf)) == 1
}
