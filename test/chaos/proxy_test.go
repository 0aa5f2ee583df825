package chaos

import (
	"bytes"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/platformd/platformd/internal/faultproxy"
)

// proxy is the fault proxy (internal/faultproxy) the daemon's DSN points
// at, with what the chaos suite reads of PostgreSQL's protocol on top. In
// black-hole mode it stops forwarding bytes in both directions (and stops
// passing on closes) without closing anything, like a network partition:
// bytes already sent wait, as TCP retransmission would, and flow again when
// the hole heals.
type proxy struct {
	*faultproxy.Proxy

	mu    sync.Mutex
	armed chan struct{} // set by blackholeOnTraffic, closed once the hole opens
	armN  int           // client chunks still to forward before it opens
	armDB string        // counting only sessions on this database

	cutN    int         // COMMITs still to cut, set by cutAfterCommit
	cutDB   string      // counting only sessions on this database
	cutTags chan string // the server's answer to each cut COMMIT
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	p := &proxy{}
	fp, err := faultproxy.New(target, faultproxy.Options{NewConn: p.hooks})
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p.Proxy = fp
	t.Cleanup(fp.Close)
	return p
}

func (p *proxy) addr() string { return p.Addr() }

// blackhole stops all forwarding until heal (and disarms
// blackholeOnTraffic).
func (p *proxy) blackhole() {
	p.mu.Lock()
	p.armed = nil
	p.mu.Unlock()
	p.Blackhole()
}

// heal forwards again, starting with what waited, and disarms
// blackholeOnTraffic.
func (p *proxy) heal() {
	p.mu.Lock()
	p.armed = nil
	p.mu.Unlock()
	p.Heal()
}

// upstreamPorts are the local ports of the proxy's connections to the
// server: pg_stat_activity.client_port of the sessions behind the proxy.
func (p *proxy) upstreamPorts() []int { return p.UpstreamPorts() }

// blackholeOnTraffic opens the black hole once n statements that follow a
// BEGIN on sessions of database db have been forwarded to the server from
// now on: the hole then catches a session inside its transaction, after its
// first statement (the dedup insert) ran, rather than between two
// transactions. The returned channel is closed once the hole is open.
func (p *proxy) blackholeOnTraffic(n int, db string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.armN, p.armDB = make(chan struct{}), n, db
	return p.armed
}

// cutAfterCommit cuts the next n sessions of database db that send the
// COMMIT of a transaction that recorded an event for good (the server
// returned an event id, and no savepoint was used, so none was rolled back
// within it), right after forwarding it: the client's side is closed at once,
// so the client never learns the outcome, while the server's side stays
// open until the server has answered, so that the commit runs to its end
// (COMMIT, or ROLLBACK for an aborted transaction). The returned channel
// receives that answer for each cut. A transaction that recorded nothing
// (all duplicates, a batch of failing events replayed with savepoints,
// another job's) is let through: its redelivery, if any, meets no row of its
// own, and the test could not tell a wrong ack from a right one by it.
func (p *proxy) cutAfterCommit(n int, db string) <-chan string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutN, p.cutDB, p.cutTags = n, db, make(chan string, n)
	return p.cutTags
}

// takeCut reports whether a COMMIT of a session on db is to be cut.
func (p *proxy) takeCut(db string) (chan string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cutN == 0 || db != p.cutDB {
		return nil, false
	}
	p.cutN--
	return p.cutTags, true
}

// isCommit reports whether a client chunk is a simple-protocol COMMIT (how
// pgx sends it).
func isCommit(chunk []byte) bool {
	return len(chunk) > 5 && chunk[0] == 'Q' && bytes.HasPrefix(bytes.ToLower(bytes.TrimSpace(chunk[5:])), []byte("commit"))
}

// commandTag returns the tag of the first CommandComplete message of a
// server chunk ("COMMIT", "ROLLBACK"), or "".
func commandTag(chunk []byte) string {
	for len(chunk) >= 5 {
		size := int(chunk[1])<<24 | int(chunk[2])<<16 | int(chunk[3])<<8 | int(chunk[4])
		if size < 4 || 1+size > len(chunk) {
			return ""
		}
		if chunk[0] == 'C' {
			return string(bytes.TrimRight(chunk[5:1+size], "\x00"))
		}
		chunk = chunk[1+size:]
	}
	return ""
}

// hasSavepoint reports whether a client chunk names a savepoint (SAVEPOINT,
// ROLLBACK TO SAVEPOINT, RELEASE SAVEPOINT: how pgx sends a nested
// transaction), as the dedup step's replay of a batch event by event does.
func hasSavepoint(chunk []byte) bool {
	return bytes.Contains(bytes.ToLower(chunk), []byte("savepoint"))
}

// isEventIDRow reports whether a server message is a DataRow of one uuid
// column, binary or text: a row of the dedup insert's RETURNING event_id.
func isEventIDRow(typ byte, body []byte) bool {
	if typ != 'D' || len(body) < 6 || binary.BigEndian.Uint16(body) != 1 {
		return false
	}
	n := int32(binary.BigEndian.Uint32(body[2:]))
	return (n == 16 || n == 36) && len(body) == 6+int(n)
}

// pgFramer splits the server's side of a session into its messages (a type
// byte, then an int32 length that counts itself), across chunk boundaries.
// It is for sessions without SSL, whose every server message is framed so.
type pgFramer struct {
	buf    []byte
	broken bool // a length no message has: the rest is not read
}

// feed adds chunk and calls fn with each message it completes; body is
// valid only during the call.
func (f *pgFramer) feed(chunk []byte, fn func(typ byte, body []byte)) {
	if f.broken {
		return
	}
	f.buf = append(f.buf, chunk...)
	i := 0
	for len(f.buf)-i >= 5 {
		size := int(binary.BigEndian.Uint32(f.buf[i+1:]))
		if size < 4 || size > 1<<26 {
			f.broken, f.buf = true, nil
			return
		}
		if len(f.buf)-i < 1+size {
			break
		}
		fn(f.buf[i], f.buf[i+5:i+1+size])
		i += 1 + size
	}
	f.buf = append(f.buf[:0], f.buf[i:]...)
}

// startupDatabase returns the database named in a PostgreSQL startup
// message (the first chunk a client sends without SSL), or "".
func startupDatabase(b []byte) string {
	const key = "database\x00"
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return ""
	}
	rest := b[i+len(key):]
	if j := bytes.IndexByte(rest, 0); j >= 0 {
		return string(rest[:j])
	}
	return ""
}

// isBegin reports whether a client chunk is a simple-protocol query
// starting a transaction (how pgx sends BEGIN).
func isBegin(chunk []byte) bool {
	return len(chunk) > 5 && chunk[0] == 'Q' && bytes.HasPrefix(bytes.ToLower(bytes.TrimSpace(chunk[5:])), []byte("begin"))
}

// trip counts a statement forwarded from a client of db right after its
// BEGIN and opens the hole if it is armed and the count is reached.
func (p *proxy) trip(db string) {
	p.mu.Lock()
	armed := p.armed
	if armed == nil || db != p.armDB {
		p.mu.Unlock()
		return
	}
	p.armN--
	if p.armN > 0 {
		p.mu.Unlock()
		return
	}
	p.armed = nil
	p.mu.Unlock()
	p.blackhole()
	close(armed)
}

// hooks reads one session's protocol as it passes: its database, its
// transactions' BEGIN and COMMIT, whether the server returned an event id
// (recorded) and whether the client used a savepoint (isolated); it trips
// the armed black hole and cuts the COMMITs cutAfterCommit asked for.
func (p *proxy) hooks(conn faultproxy.Conn) faultproxy.Hooks {
	// A cut COMMIT: its answer is reported on cutTags, and the
	// client-to-server side leaves the server's connection open for the
	// server-to-client side to close once the answer came.
	var cutMu sync.Mutex
	var cutTags chan string
	cutPending := func() chan string {
		cutMu.Lock()
		defer cutMu.Unlock()
		return cutTags
	}
	var recorded, isolated atomic.Bool
	db, first, afterBegin := "", true, false // the client-to-server side's own
	var fr pgFramer                          // the server-to-client side's own
	return faultproxy.Hooks{
		ToServer: func(chunk []byte) {
			if !first && hasSavepoint(chunk) {
				isolated.Store(true)
			}
			switch {
			case first:
				first, db = false, startupDatabase(chunk)
			case isBegin(chunk):
				afterBegin = true
				recorded.Store(false)
				isolated.Store(false)
			case isCommit(chunk):
				if !recorded.Load() || isolated.Load() {
					break
				}
				if tags, ok := p.takeCut(db); ok {
					cutMu.Lock()
					cutTags = tags
					cutMu.Unlock()
					_ = conn.Client.Close()
				}
			case afterBegin:
				afterBegin = false
				p.trip(db)
			}
		},
		ToClient: func(chunk []byte) {
			fr.feed(chunk, func(typ byte, body []byte) {
				if isEventIDRow(typ, body) {
					recorded.Store(true)
				}
			})
			if tags := cutPending(); tags != nil {
				cutMu.Lock()
				cutTags = nil
				cutMu.Unlock()
				tags <- commandTag(chunk)
				_ = conn.Server.Close() // the answer came: the commit ran to its end
			}
		},
		KeepServerOpen: func() bool { return cutPending() != nil },
	}
}
