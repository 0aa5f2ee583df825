package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Event names and failure reasons of the contract (docs/contracts.md). The suite
// spells them out instead of importing the product's constants: it checks
// the contract, not the code.
const (
	evPlaced        = "order.order.placed.v1"
	evStatusChanged = "order.order.status_changed.v1"

	reasonDecode    = "decode"
	reasonNoHandler = "no_handler"
	reasonPermanent = "permanent"
	// reasonBeyondHorizon: only the partitioned variant sends such input.
	reasonBeyondHorizon = "beyond_horizon"
)

// goodEvent is one valid event the producer sends (perhaps several times).
type goodEvent struct {
	id      uuid.UUID
	name    string
	body    []byte
	orderID uuid.UUID
	// stock: the order's lines and total quantity in thousandths
	lines    int
	qtyMilli int64
	// shipping: the status at this version
	version int
	status  string
}

// badInput is one message that must end as a row of its service's failure
// store.
type badInput struct {
	kind    string
	rk      string
	body    []byte
	reason  string
	queue   string    // its pool's queue (stock or shipping)
	eventID uuid.UUID // set when the body carries a valid id: it must never be recorded
	orderID uuid.UUID // set for a stock order that must never be reserved
	headers amqp.Table
}

// plan is the whole stream: good events in publishing order and the bad
// inputs with the positions they are interleaved at.
type plan struct {
	goods      []*goodEvent
	stockByOrd map[uuid.UUID]*goodEvent
	shipFinal  map[uuid.UUID]*goodEvent // order -> highest version
	bad        []*badInput
	badAt      map[int][]*badInput
}

func (pl *plan) count(name string) int {
	n := 0
	for _, g := range pl.goods {
		if g.name == name {
			n++
		}
	}
	return n
}

type wireEnvelope struct {
	EventID    string          `json:"event_id"`
	EventName  string          `json:"event_name"`
	OccurredAt string          `json:"occurred_at"`
	Payload    json.RawMessage `json:"payload"`
}

func encode(id uuid.UUID, name string, payload any) []byte {
	p, err := json.Marshal(payload)
	if err != nil {
		panic(err)
	}
	b, err := json.Marshal(wireEnvelope{EventID: id.String(), EventName: name,
		OccurredAt: time.Now().UTC().Format(time.RFC3339Nano), Payload: p})
	if err != nil {
		panic(err)
	}
	return b
}

type orderLine struct {
	ProductID string `json:"product_id"`
	Quantity  string `json:"quantity"`
}

type orderPlaced struct {
	OrderID    string      `json:"order_id"`
	CustomerID string      `json:"customer_id"`
	Lines      []orderLine `json:"lines"`
}

type statusChanged struct {
	OrderID string `json:"order_id"`
	Status  string `json:"status"`
	Version int    `json:"version"`
}

var statuses = []string{"placed", "paid", "packed", "shipped", "delivered"}

func newV7() uuid.UUID { return uuid.Must(uuid.NewV7()) }

// newPlan draws n good events (about 3 stock orders for 1 shipping status
// change; shipping versions of an order arrive partly out of order) and the
// bad inputs, spread over the stream.
func newPlan(rng *mrand.Rand, n int, e *env) *plan {
	pl := &plan{stockByOrd: map[uuid.UUID]*goodEvent{}, shipFinal: map[uuid.UUID]*goodEvent{}, badAt: map[int][]*badInput{}}
	var shipPending []*goodEvent
	for len(pl.goods) < n {
		if rng.IntN(4) > 0 || len(shipPending) == 0 && rng.IntN(2) == 0 {
			g := &goodEvent{id: newV7(), name: evPlaced, orderID: uuid.New(), lines: 1 + rng.IntN(3)}
			o := orderPlaced{OrderID: g.orderID.String(), CustomerID: uuid.NewString()}
			for range g.lines {
				milli := int64(1 + rng.IntN(20000))
				q := fmt.Sprintf("%d.%03d", milli/1000, milli%1000)
				if milli%1000 == 0 && rng.IntN(2) == 0 {
					q = fmt.Sprint(milli / 1000)
				}
				g.qtyMilli += milli
				o.Lines = append(o.Lines, orderLine{ProductID: uuid.NewString(), Quantity: q})
			}
			g.body = encode(g.id, g.name, o)
			pl.goods = append(pl.goods, g)
			pl.stockByOrd[g.orderID] = g
			continue
		}
		if len(shipPending) == 0 {
			order := uuid.New()
			versions := 1 + rng.IntN(4)
			for v := 1; v <= versions; v++ {
				g := &goodEvent{id: newV7(), name: evStatusChanged, orderID: order, version: v, status: statuses[v-1]}
				g.body = encode(g.id, g.name, statusChanged{OrderID: order.String(), Status: g.status, Version: v})
				shipPending = append(shipPending, g)
			}
			// Out of order now and then: the version check, not the
			// dedup table, must keep the newest status.
			if versions > 1 && rng.IntN(2) == 0 {
				i := rng.IntN(versions - 1)
				shipPending[i], shipPending[i+1] = shipPending[i+1], shipPending[i]
			}
		}
		pl.goods = append(pl.goods, shipPending[0])
		shipPending = shipPending[1:]
	}
	// The newest version sent of each order (the stream may end before
	// an order's last versions).
	for _, g := range pl.goods {
		if g.name == evStatusChanged {
			if f := pl.shipFinal[g.orderID]; f == nil || f.version < g.version {
				pl.shipFinal[g.orderID] = g
			}
		}
	}
	pl.bad = badInputs(e)
	for _, b := range pl.bad {
		pos := rng.IntN(len(pl.goods))
		pl.badAt[pos] = append(pl.badAt[pos], b)
	}
	return pl
}

// badInputs lists one message per defect, each unique, with the failure
// reason the contract gives it.
func badInputs(e *env) []*badInput {
	now := time.Now().UTC().Format(time.RFC3339Nano)
	validOrder := func() string {
		return fmt.Sprintf(`{"order_id":%q,"customer_id":%q,"lines":[{"product_id":%q,"quantity":"1.000"}]}`,
			uuid.NewString(), uuid.NewString(), uuid.NewString())
	}
	env := func(id, name, payload string) string {
		return fmt.Sprintf(`{"event_id":%s,"event_name":%q,"occurred_at":%q,"payload":%s}`, id, name, now, payload)
	}
	q := func(s string) string { return `"` + s + `"` }
	var out []*badInput
	stock := func(kind, reason, body string) *badInput {
		b := &badInput{kind: kind, rk: evPlaced, body: []byte(body), reason: reason, queue: e.stockQ}
		out = append(out, b)
		return b
	}
	ship := func(kind, reason, body string) *badInput {
		b := &badInput{kind: kind, rk: evStatusChanged, body: []byte(body), reason: reason, queue: e.shipQ}
		out = append(out, b)
		return b
	}
	id := func() string { return newV7().String() }

	stock("malformed JSON", reasonDecode, `{"event_id":"`+id()+`","event_name":"order.order.placed.v1","occurred_at":`)
	stock("JSON array, not an object", reasonDecode, `[`+env(q(id()), evPlaced, validOrder())+`]`)
	stock("JSON string, not an object", reasonDecode, q(id()))
	stock("empty body", reasonDecode, ``).body = nil
	stock("missing event_id", reasonDecode, fmt.Sprintf(`{"event_name":%q,"occurred_at":%q,"payload":%s}`, evPlaced, now, validOrder()))
	stock("event_id in braces", reasonDecode, env(q("{"+id()+"}"), evPlaced, validOrder()))
	stock("event_id with urn:uuid: prefix", reasonDecode, env(q("urn:uuid:"+id()), evPlaced, validOrder()))
	stock("event_id without hyphens", reasonDecode, env(q(strings.ReplaceAll(id(), "-", "")), evPlaced, validOrder()))
	// The nil UUID is the same for everyone: the order inside makes the body unique.
	stock("nil event_id", reasonDecode, env(q(uuid.Nil.String()), evPlaced, validOrder()))
	stock("event_id not a string", reasonDecode, env("12345", evPlaced, validOrder()))
	stock("empty event_name", reasonDecode, env(q(id()), "", validOrder()))
	stock("occurred_at not RFC 3339", reasonDecode, strings.Replace(env(q(id()), evPlaced, validOrder()), now, "yesterday", 1))
	stock("payload not an object", reasonDecode, env(q(id()), evPlaced, `[1,2,3]`))
	stock("NUL escape in a payload string", reasonDecode, env(q(id()), evPlaced,
		fmt.Sprintf(`{"order_id":%q,"customer_id":"a\u0000b","lines":[]}`, uuid.NewString())))
	stock("raw NUL byte in a payload string", reasonDecode, env(q(id()), evPlaced,
		fmt.Sprintf(`{"order_id":%q,"customer_id":"a`+"\x00"+`b","lines":[]}`, uuid.NewString())))
	stock("invalid UTF-8", reasonDecode, env(q(id()), evPlaced,
		fmt.Sprintf(`{"order_id":%q,"customer_id":"caf`+"\xe9\xff"+`","lines":[]}`, uuid.NewString())))
	dupID := id()
	stock("duplicate key in the envelope", reasonDecode, strings.Replace(env(q(dupID), evPlaced, validOrder()),
		`"event_id":`+q(dupID), `"event_id":`+q(id())+`,"event_id":`+q(dupID), 1))
	o := uuid.NewString()
	stock("duplicate key in the payload", reasonDecode, env(q(id()), evPlaced,
		fmt.Sprintf(`{"order_id":%q,"order_id":%q,"customer_id":%q,"lines":[{"product_id":%q,"quantity":"1.000"}]}`,
			uuid.NewString(), o, uuid.NewString(), uuid.NewString())))
	stock("case-variant key Event_ID", reasonDecode, strings.Replace(env(q(id()), evPlaced, validOrder()), `"event_id"`, `"Event_ID"`, 1))
	stock("trailing data", reasonDecode, env(q(id()), evPlaced, validOrder())+` {"event_id":"x"}`)
	pad := strings.Repeat("x", maxBody+1024)
	stock("body over max_body_bytes", reasonDecode, env(q(id()), evPlaced,
		fmt.Sprintf(`{"order_id":%q,"customer_id":%q,"lines":[{"product_id":%q,"quantity":"1.000"}],"note":%q}`,
			uuid.NewString(), uuid.NewString(), uuid.NewString(), pad)))

	unknown := stock("unknown event name", reasonNoHandler, "")
	unknown.eventID = newV7()
	unknown.body = []byte(env(q(unknown.eventID.String()), "order.order.cancelled.v1", validOrder()))
	other := stock("another service's event on the stock queue", reasonNoHandler, "")
	other.eventID = newV7()
	other.body = []byte(env(q(other.eventID.String()), evStatusChanged,
		fmt.Sprintf(`{"order_id":%q,"status":"paid","version":1}`, uuid.NewString())))

	perm := func(b *badInput, payload string) {
		b.eventID = newV7()
		b.body = []byte(env(q(b.eventID.String()), evPlaced, payload))
	}
	b := stock("wrong payload type: order_id a number", reasonPermanent, "")
	perm(b, fmt.Sprintf(`{"order_id":12,"customer_id":%q,"lines":[{"product_id":%q,"quantity":"1.000"}]}`, uuid.NewString(), uuid.NewString()))
	b = stock("wrong payload type: quantity a number", reasonPermanent, "")
	b.orderID = uuid.New()
	perm(b, fmt.Sprintf(`{"order_id":%q,"customer_id":%q,"lines":[{"product_id":%q,"quantity":2}]}`, b.orderID, uuid.NewString(), uuid.NewString()))
	b = stock("wrong payload type: lines an object", reasonPermanent, "")
	b.orderID = uuid.New()
	perm(b, fmt.Sprintf(`{"order_id":%q,"customer_id":%q,"lines":{"product_id":%q}}`, b.orderID, uuid.NewString(), uuid.NewString()))

	ship("shipping: malformed JSON", reasonDecode, `{"event_id":"`+id()+`","event_name":"order.order.status_changed.v1",`)
	ship("shipping: NUL escape in status", reasonDecode, env(q(id()), evStatusChanged,
		fmt.Sprintf(`{"order_id":%q,"status":"pa\u0000id","version":1}`, uuid.NewString())))
	sb := ship("shipping: unknown event name (v2)", reasonNoHandler, "")
	sb.eventID = newV7()
	sb.body = []byte(env(q(sb.eventID.String()), "order.order.status_changed.v2", fmt.Sprintf(`{"order_id":%q,"status":"paid","version":1}`, uuid.NewString())))
	sb = ship("shipping: wrong payload type: version a string", reasonPermanent, "")
	sb.eventID = newV7()
	sb.body = []byte(env(q(sb.eventID.String()), evStatusChanged, fmt.Sprintf(`{"order_id":%q,"status":"paid","version":"3"}`, uuid.NewString())))
	if e.partitioned {
		partitionedBadInputs(stock, func(id uuid.UUID) []byte { return []byte(env(q(id.String()), evPlaced, validOrder())) })
	}
	return out
}

// outMsg is one message to publish.
type outMsg struct {
	rk      string
	body    []byte
	headers amqp.Table
	good    bool
}

// pubStats counts what was sent.
type pubStats struct {
	originals   atomic.Int64 // first copies of good events
	republished atomic.Int64 // relay republishes (same body, new message)
	replayed    atomic.Int64 // copies with x-replay
	resent      atomic.Int64 // unconfirmed windows sent again after a broker failure
	bad         atomic.Int64
	returned    atomic.Int64 // unroutable: a bug in the suite or the topology
}

// publisher publishes with confirms and mandatory routing, like an outbox
// relay: what is not confirmed is sent again on a fresh connection, which
// is itself a source of duplicates.
type publisher struct {
	urls     []string // a cluster's nodes: tried in turn
	exchange string
	stats    *pubStats
	conn     *amqp.Connection
	ch       *amqp.Channel
	sock     net.Conn // conn's socket
	next     int
}

func (p *publisher) connect(ctx context.Context) error {
	p.close()
	backoff := 50 * time.Millisecond
	for {
		u := p.urls[p.next%len(p.urls)]
		p.next++
		var sock net.Conn
		conn, err := amqp.DialConfig(u, amqp.Config{Properties: amqp.Table{"connection_name": "chaos-producer"},
			Dial: func(network, addr string) (net.Conn, error) {
				c, err := dialWriteBounded(network, addr)
				sock = c
				return c, err
			}})
		if err == nil {
			// Bounded: a node cut off from its cluster can answer nothing
			// while its heartbeats keep the read deadline alive.
			guard := time.AfterFunc(producerWriteTimeout, func() { _ = sock.Close() })
			ch, cerr := conn.Channel()
			if cerr == nil {
				cerr = ch.Confirm(false)
			}
			guard.Stop()
			if cerr == nil {
				returns := ch.NotifyReturn(make(chan amqp.Return, 16))
				go func() {
					for range returns {
						p.stats.returned.Add(1)
					}
				}()
				p.conn, p.ch, p.sock = conn, ch, sock
				return nil
			}
			closeBounded(conn, sock)
			err = cerr
		}
		if sleepCtx(ctx, backoff) != nil {
			return fmt.Errorf("producer: connect: %w", err)
		}
		backoff = min(backoff*2, time.Second)
	}
}

// producerWriteTimeout bounds each write of the producer's connection.
const producerWriteTimeout = 5 * time.Second

// dialWriteBounded dials as amqp091-go does by default (5 s for the
// connection and the handshake) and bounds every later write: amqp091-go
// writes without a deadline, and a write to a black-holed node blocks once
// the socket's send buffer holds what the peer never acknowledged, holding
// the connection's send lock until the heartbeat's read timeout (15 s).
// Failed, the connection shuts down and the producer moves to another
// node. (The partition stalls this was first written for were the close;
// see close.)
func dialWriteBounded(network, addr string) (net.Conn, error) {
	conn, err := amqp.DefaultDial(5*time.Second)(network, addr)
	if err != nil {
		return nil, err
	}
	return writeBounded{conn}, nil
}

type writeBounded struct{ net.Conn }

func (c writeBounded) Write(b []byte) (int, error) {
	if err := c.SetWriteDeadline(time.Now().Add(producerWriteTimeout)); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

func (p *publisher) close() {
	if p.conn != nil {
		// Bounded: Close waits for the broker's close-ok, which a node cut
		// off from its cluster may never send while its heartbeats keep
		// the read deadline alive (CloseDeadline's deadline too: the
		// library pushes it back at every frame read). The producer then
		// stalled until the heal, and no pool could show a commit through
		// another node: TestChaosBrokerCluster failed so twice, its
		// producer stuck for the whole 90 s of a partition.
		closeBounded(p.conn, p.sock)
		p.conn, p.ch, p.sock = nil, nil, nil
	}
}

// closeBounded closes conn, and its socket if the broker has not answered
// within 2 s.
func closeBounded(conn *amqp.Connection, sock net.Conn) {
	t := time.AfterFunc(2*time.Second, func() { _ = sock.Close() })
	defer t.Stop()
	_ = conn.Close()
}

// send publishes msgs and returns once every one is confirmed.
func (p *publisher) send(ctx context.Context, msgs []outMsg) error {
	pending := msgs
	for round := 0; len(pending) > 0; round++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if round > 0 {
			for _, m := range pending {
				if m.good {
					p.stats.resent.Add(1)
				}
			}
		}
		if p.ch == nil || p.ch.IsClosed() {
			if err := p.connect(ctx); err != nil {
				return err
			}
		}
		var failed []outMsg
		dcs := make([]*amqp.DeferredConfirmation, 0, len(pending))
		sent := pending[:0:0]
		for i, m := range pending {
			dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, p.exchange, m.rk, true, false, amqp.Publishing{
				ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: m.body, Headers: m.headers,
			})
			if err != nil {
				failed = append(failed, pending[i:]...)
				break
			}
			dcs = append(dcs, dc)
			sent = append(sent, m)
		}
		// One deadline for the window: confirms that stall (a node cut
		// off) must not each wait their own. A window's confirms take
		// milliseconds; 5 s (was 15) moves the producer off a cut-off node
		// sooner, so that a partition's failover measures the pools more
		// than the producer.
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		for i, dc := range dcs {
			ok, err := dc.WaitContext(wctx)
			if err != nil || !ok {
				failed = append(failed, sent[i])
			}
		}
		cancel()
		if len(failed) > 0 {
			p.close()
		}
		pending = failed
	}
	return nil
}

// producer publishes the plan at a steady pace, with relay republishes and
// replays of a share of the events.
type producer struct {
	pl       *plan
	pub      *publisher
	rng      *mrand.Rand
	duration time.Duration

	mu   sync.Mutex
	sent int // goods[:sent] were published and confirmed

	done chan struct{}
	err  error
}

// Shares of the good events sent twice by the relay, and replayed later.
const (
	republishShare = 0.07
	replayShare    = 0.03
)

func newProducer(e *env, pl *plan, rng *mrand.Rand, duration time.Duration, stats *pubStats) *producer {
	return &producer{pl: pl, rng: mrand.New(mrand.NewPCG(rng.Uint64(), rng.Uint64())), duration: duration,
		pub:  &publisher{urls: e.amqpURLs, exchange: e.exchange, stats: stats},
		done: make(chan struct{})}
}

func replayHeaders() amqp.Table { return amqp.Table{"x-replay": "chaos"} }

func (pr *producer) run(ctx context.Context) {
	defer close(pr.done)
	defer pr.pub.close()
	n := len(pr.pl.goods)
	start := time.Now()
	later := map[int][]outMsg{} // copies due at a later position
	const window = 25
	var batch []outMsg
	flush := func(upto int) error {
		if len(batch) == 0 {
			return nil
		}
		if err := pr.pub.send(ctx, batch); err != nil {
			return err
		}
		batch = batch[:0]
		pr.mu.Lock()
		pr.sent = upto
		pr.mu.Unlock()
		due := start.Add(time.Duration(float64(pr.duration) * float64(upto) / float64(n)))
		if d := time.Until(due); d > 0 {
			return sleepCtx(ctx, d)
		}
		return nil
	}
	for i, g := range pr.pl.goods {
		for _, b := range pr.pl.badAt[i] {
			batch = append(batch, outMsg{rk: b.rk, body: b.body, headers: b.headers})
			pr.pub.stats.bad.Add(1)
		}
		batch = append(batch, later[i]...)
		delete(later, i)
		batch = append(batch, outMsg{rk: g.name, body: g.body, good: true})
		pr.pub.stats.originals.Add(1)
		if pr.rng.Float64() < republishShare {
			at := i + pr.rng.IntN(60)
			later[at] = append(later[at], outMsg{rk: g.name, body: g.body, good: true})
			pr.pub.stats.republished.Add(1)
		}
		if pr.rng.Float64() < replayShare {
			at := i + 200 + pr.rng.IntN(n/2+1)
			later[at] = append(later[at], outMsg{rk: g.name, body: g.body, headers: replayHeaders(), good: true})
			pr.pub.stats.replayed.Add(1)
		}
		if len(batch) >= window {
			if err := flush(i + 1); err != nil {
				pr.err = err
				return
			}
		}
	}
	for _, msgs := range later {
		batch = append(batch, msgs...)
	}
	if err := flush(n); err != nil {
		pr.err = err
	}
}

// recent returns up to k of the last published good events.
func (pr *producer) recent(k int) []*goodEvent {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	from := max(0, pr.sent-k)
	return append([]*goodEvent(nil), pr.pl.goods[from:pr.sent]...)
}

// published returns how many good events were published so far.
func (pr *producer) published() int {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.sent
}

func (pr *producer) wait(ctx context.Context) error {
	select {
	case <-pr.done:
		return pr.err
	case <-ctx.Done():
		return errors.New("producer still running")
	}
}
