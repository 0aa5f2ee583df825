package main

// This file plans the run: the orders and their events the demo writes,
// kept in memory to check the databases afterwards, and the envelope each
// event travels in.

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"

	"github.com/platformd/platformd/examples/shop"
)

// statuses are the successive statuses of an order: version v has
// statuses[v-1].
var statuses = []string{"paid", "packed", "shipped"}

// event is one event as the producer's outbox holds it: its id is set once,
// when the row is written. body is its envelope, as replay tooling sends it
// again.
type event struct {
	id      uuid.UUID
	name    string // also the routing key
	payload []byte
	body    []byte
}

// order is what the demo expects the consumers to end up with for one
// order.
type order struct {
	id       uuid.UUID
	customer uuid.UUID
	events   []*event // its placed event, then its status changes
	lines    []shop.OrderLine
	status   string // final status
	version  int32  // final version
}

// plan is everything this run sends, kept in memory to check the databases
// afterwards.
type plan struct {
	orders []order
	// events in publish order: each order's placed event, then its status
	// changes by increasing version.
	events      []*event
	orderIDs    []uuid.UUID
	stockIDs    []uuid.UUID // ids of order.order.placed.v1 events
	shippingIDs []uuid.UUID // ids of order.order.status_changed.v1 events
	lines       int         // order lines in all: the reservations expected
	// replay is the range of events replayed after the stream.
	replay []*event
}

// newPlan makes n orders with 1-3 lines and 1-3 status changes each and
// picks a contiguous range of events (a "period", as after an incident) for
// the replay.
func newPlan(n int, replayShare float64, seed uint64) (*plan, error) {
	if seed == 0 {
		seed = rand.Uint64()
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	p := &plan{orders: make([]order, 0, n), orderIDs: make([]uuid.UUID, 0, n), stockIDs: make([]uuid.UUID, 0, n)}
	for range n {
		o := order{id: uuid.New(), customer: uuid.New()}
		for range 1 + r.IntN(3) {
			o.lines = append(o.lines, shop.OrderLine{
				ProductID: uuid.New(),
				// Three decimals, as numeric(12,3) prints it back.
				Quantity: fmt.Sprintf("%d.%03d", 1+r.IntN(5), 250*r.IntN(4)),
			})
		}
		ev, err := newEvent(shop.EventOrderPlaced, shop.OrderPlaced{OrderID: o.id, CustomerID: o.customer, Lines: o.lines})
		if err != nil {
			return nil, err
		}
		p.events = append(p.events, ev)
		o.events = append(o.events, ev)
		p.stockIDs = append(p.stockIDs, ev.id)
		p.lines += len(o.lines)
		k := 1 + r.IntN(len(statuses))
		for v := 1; v <= k; v++ {
			ev, err := newEvent(shop.EventOrderStatusChanged, shop.OrderStatusChanged{OrderID: o.id, Status: statuses[v-1], Version: int32(v)})
			if err != nil {
				return nil, err
			}
			p.events = append(p.events, ev)
			o.events = append(o.events, ev)
			p.shippingIDs = append(p.shippingIDs, ev.id)
		}
		o.status, o.version = statuses[k-1], int32(k)
		p.orders = append(p.orders, o)
		p.orderIDs = append(p.orderIDs, o.id)
	}
	// Replay a period from a quarter into the stream.
	nReplay := share(len(p.events), replayShare)
	start := min(len(p.events)/4, len(p.events)-nReplay)
	p.replay = p.events[start : start+nReplay]
	return p, nil
}

// share returns round(f*n), at most n.
func share(n int, f float64) int {
	return min(n, int(f*float64(n)+0.5))
}

// envelopeJSON is the documented envelope (docs/contracts.md) of every
// message: replay tooling sends it as the relay does.
type envelopeJSON struct {
	EventID    string          `json:"event_id"`
	EventName  string          `json:"event_name"`
	OccurredAt string          `json:"occurred_at"`
	Payload    json.RawMessage `json:"payload"`
}

// newEvent encodes one envelope with a fresh UUID v7: the producer sets the
// id when it writes its outbox row, never the consumer.
func newEvent(name string, payload any) (*event, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("new event id: %w", err)
	}
	raw, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("encode %s payload: %w", name, err)
	}
	body, err := json.Marshal(envelopeJSON{EventID: id.String(), EventName: name, OccurredAt: time.Now().UTC().Format(time.RFC3339Nano), Payload: raw})
	if err != nil {
		return nil, fmt.Errorf("encode %s envelope: %w", name, err)
	}
	return &event{id: id, name: name, payload: raw, body: body}, nil
}
