package soak

import (
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
)

// sent is one event the producer wrote to the order service's outbox.
type sent struct {
	id        uuid.UUID
	name      string
	orderID   uuid.UUID
	lines     int // placed: its lines
	version   int // status: its version
	poison    bool
	uncertain bool // the insert's outcome is unknown (a fault cut it)
}

type openOrder struct {
	id      uuid.UUID
	version int
}

// producer writes the load: orders placed and their status changes, each
// row of platform.outbox in its own transaction, as a producer service
// would; the relay publishes them.
type producer struct {
	w    *world
	rng  *mrand.Rand
	tick time.Duration

	mu          sync.Mutex
	events      []*sent
	open        []*openOrder
	failures    int // inserts whose outcome was unknown
	republished int // copies published again as a relay would after a crash
}

var statuses = []string{"", "paid", "shipped", "delivered"}

func (p *producer) run(ctx context.Context) {
	tick := time.NewTicker(p.tick)
	defer tick.Stop()
	next := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		p.one(ctx)
		if time.Now().After(next) {
			next = time.Now().Add(15 * time.Second)
			p.republish(ctx)
		}
	}
}

// one writes the next event: a new order or the next status of an open
// one.
func (p *producer) one(ctx context.Context) {
	p.mu.Lock()
	ev := &sent{id: uuid.Must(uuid.NewV7())}
	var payload map[string]any
	if len(p.open) == 0 || p.rng.IntN(2) == 0 {
		o := &openOrder{id: uuid.New()}
		p.open = append(p.open, o)
		ev.name, ev.orderID, ev.lines = evPlaced, o.id, 1+p.rng.IntN(2)
		ev.poison = p.rng.IntN(200) == 0
		lines := make([]map[string]any, ev.lines)
		for i := range lines {
			lines[i] = map[string]any{"product_id": uuid.New().String(), "quantity": fmt.Sprintf("%d.000", 1+p.rng.IntN(5))}
		}
		payload = map[string]any{"order_id": o.id.String(), "customer_id": uuid.New().String(), "lines": lines}
		if ev.poison {
			payload["poison"] = true
		}
	} else {
		i := p.rng.IntN(len(p.open))
		o := p.open[i]
		o.version++
		ev.name, ev.orderID, ev.version = evStatus, o.id, o.version
		payload = map[string]any{"order_id": o.id.String(), "status": statuses[o.version], "version": o.version}
		if o.version == len(statuses)-1 {
			p.open = append(p.open[:i], p.open[i+1:]...)
		}
	}
	p.events = append(p.events, ev)
	p.mu.Unlock()
	body, _ := json.Marshal(payload)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := p.w.db("order").Exec(cctx, `INSERT INTO platform.outbox (event_id, event_name, payload) VALUES ($1, $2, $3::jsonb)`,
		ev.id, ev.name, string(body)); err != nil {
		p.mu.Lock()
		ev.uncertain = true
		p.failures++
		p.mu.Unlock()
	}
}

// republish publishes again, straight to the exchange, copies of a few
// events the relay published over 10 s ago: what a relay does when it
// dies between the broker's confirm and its delete (the seed's
// "republish" duplicate), now and then rather than only when a SIGKILL
// happens to land in that window.
func (p *producer) republish(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	rows, err := p.w.db("order").Query(cctx, `SELECT event_id, event_name, occurred_at, payload::text FROM platform.outbox_archive
		WHERE published_at < now() - interval '10 seconds' ORDER BY random() LIMIT 5`)
	if err != nil {
		return
	}
	type msg struct {
		id       uuid.UUID
		name     string
		occurred time.Time
		payload  string
	}
	var msgs []msg
	for rows.Next() {
		var m msg
		if rows.Scan(&m.id, &m.name, &m.occurred, &m.payload) == nil {
			msgs = append(msgs, m)
		}
	}
	rows.Close()
	if len(msgs) == 0 {
		return
	}
	conn, err := p.w.dialAMQP("soak-republish")
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	if ch.Confirm(false) != nil {
		return
	}
	for _, m := range msgs {
		body, _ := json.Marshal(map[string]any{"event_id": m.id, "event_name": m.name,
			"occurred_at": m.occurred.UTC().Format(time.RFC3339Nano), "payload": json.RawMessage(m.payload)})
		dc, err := ch.PublishWithDeferredConfirmWithContext(cctx, exchange, m.name, false, false, amqp.Publishing{
			ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: m.id.String(), Body: body})
		if err != nil {
			return
		}
		if ok, err := dc.WaitContext(cctx); err == nil && ok {
			p.mu.Lock()
			p.republished++
			p.mu.Unlock()
		}
	}
}

func (p *producer) snapshot() []*sent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*sent(nil), p.events...)
}

func (p *producer) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.events)
}

// dialAMQP connects to the first cluster node that answers.
func (w *world) dialAMQP(name string) (*amqp.Connection, error) {
	var last error
	for _, i := range mrand.Perm(len(w.nodes)) {
		conn, err := amqp.DialConfig(w.nodes[i], amqp.Config{Dial: amqp.DefaultDial(5 * time.Second),
			Properties: amqp.Table{"connection_name": name}})
		if err == nil {
			return conn, nil
		}
		last = err
	}
	return nil, last
}

// tap reads a quorum queue bound to every routing key of the exchange:
// every copy anyone published, by event id and name (it outlives a node's
// loss and reconnects).
type tap struct {
	w *world

	mu     sync.Mutex
	copies map[uuid.UUID]int
	names  map[uuid.UUID]string
	total  int
}

func newTap(w *world) (*tap, error) {
	tp := &tap{w: w, copies: map[uuid.UUID]int{}, names: map[uuid.UUID]string{}}
	conn, err := w.dialAMQP("soak-tap-setup")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return nil, err
	}
	if _, err := ch.QueueDeclare(tapQueue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		return nil, err
	}
	return tp, ch.QueueBind(tapQueue, "#", exchange, false, nil)
}

// run consumes until ctx ends, reconnecting after every loss.
func (tp *tap) run(ctx context.Context) {
	for ctx.Err() == nil {
		_ = tp.consume(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (tp *tap) consume(ctx context.Context) error {
	conn, err := tp.w.dialAMQP("soak-tap")
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Qos(500, 0, false); err != nil {
		return err
	}
	ds, err := ch.Consume(tapQueue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-ds:
			if !ok {
				return nil
			}
			var env struct {
				ID   uuid.UUID `json:"event_id"`
				Name string    `json:"event_name"`
			}
			if json.Unmarshal(d.Body, &env) == nil {
				tp.mu.Lock()
				tp.copies[env.ID]++
				tp.names[env.ID] = env.Name
				tp.total++
				tp.mu.Unlock()
			}
			_ = d.Ack(false)
		}
	}
}

// events returns the name of every event the tap saw, by id.
func (tp *tap) events() map[uuid.UUID]string {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	out := make(map[uuid.UUID]string, len(tp.names))
	for id, n := range tp.names {
		out[id] = n
	}
	return out
}

// seen counts the events the tap saw and their copies.
func (tp *tap) seen() (events, copies int) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return len(tp.copies), tp.total
}
