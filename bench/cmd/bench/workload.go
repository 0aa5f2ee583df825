package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/examples/shop"
	"github.com/platformd/platformd/internal/envelope"
)

// workload is the message sequence every contender drains: distinct
// order.order.placed.v1 events, a share of which appear twice (byte-identical
// copies, as a relay republish would send them), in the order of orderMode.
type workload struct {
	bodies   [][]byte // in publish order
	distinct int      // distinct events (orders)
	lines    int      // lines per order
}

// total is the number of messages published.
func (w *workload) total() int { return len(w.bodies) }

// dups is the number of second copies.
func (w *workload) dups() int { return w.total() - w.distinct }

// productPool is how many distinct products the orders draw from.
const productPool = 1000

// Message orders of a workload.
const (
	// orderProducer is what a queue fed by outbox relays holds: events in
	// the order they were written (their UUID v7 ids ascending), each
	// republished copy a random distance of 1 to dupDistance messages
	// after its original.
	orderProducer = "producer"
	// orderShuffled is the whole sequence shuffled: ids in random order,
	// the worst case for every primary key index on the way.
	orderShuffled = "shuffled"
)

// dupDistance bounds how far (in messages) a republished copy follows its
// original in orderProducer.
const dupDistance = 1000

// newWorkload builds events events of lines lines each, dupShare of them
// delivered twice, in the given order, deterministically from seed (ids
// aside: event ids are UUID v7 made now, as a producer's outbox would).
func newWorkload(events int, dupShare float64, lines int, seed uint64, order string) (*workload, error) {
	if events <= 0 || lines <= 0 || dupShare < 0 || dupShare > 1 {
		return nil, fmt.Errorf("workload: need events > 0, lines > 0 and 0 <= dup share <= 1 (got %d, %d, %g)", events, lines, dupShare)
	}
	if order != orderProducer && order != orderShuffled {
		return nil, fmt.Errorf("workload: order %q: want %s or %s", order, orderProducer, orderShuffled)
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	randUUID := func() uuid.UUID {
		var u uuid.UUID
		for i := range u {
			u[i] = byte(rng.Uint32())
		}
		u[6] = u[6]&0x0f | 0x40 // version 4
		u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
		return u
	}
	products := make([]uuid.UUID, productPool)
	for i := range products {
		products[i] = randUUID()
	}
	now := time.Now().UTC()
	bodies := make([][]byte, 0, events+int(float64(events)*dupShare)+1)
	for range events {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, err
		}
		body, err := orderBody(id, randUUID(), randUUID(), lines, products, rng, now)
		if err != nil {
			return nil, err
		}
		bodies = append(bodies, body)
	}
	dups := int(float64(events)*dupShare + 0.5)
	if order == orderShuffled {
		for _, i := range rng.Perm(events)[:dups] {
			bodies = append(bodies, bodies[i])
		}
		rng.Shuffle(len(bodies), func(i, j int) { bodies[i], bodies[j] = bodies[j], bodies[i] })
		return &workload{bodies: bodies, distinct: events, lines: lines}, nil
	}
	// Originals at positions 0..events-1; a copy of original i goes after
	// the original at i+d (d in 1..dupDistance), before the next one.
	type placed struct {
		at   float64
		body []byte
	}
	seq := make([]placed, 0, events+dups)
	for i, b := range bodies {
		seq = append(seq, placed{at: float64(i), body: b})
	}
	for _, i := range rng.Perm(events)[:dups] {
		seq = append(seq, placed{at: float64(i+1+rng.IntN(dupDistance)) - 0.5, body: bodies[i]})
	}
	slices.SortStableFunc(seq, func(a, b placed) int { return cmp.Compare(a.at, b.at) })
	out := make([][]byte, len(seq))
	for i, p := range seq {
		out[i] = p.body
	}
	return &workload{bodies: out, distinct: events, lines: lines}, nil
}

// orderBody encodes one order.order.placed.v1 envelope with the product's
// encoder.
func orderBody(id, orderID, customerID uuid.UUID, lines int, products []uuid.UUID, rng *rand.Rand, at time.Time) ([]byte, error) {
	o := shop.OrderPlaced{OrderID: orderID, CustomerID: customerID, Lines: make([]shop.OrderLine, lines)}
	for i := range o.Lines {
		o.Lines[i] = shop.OrderLine{
			ProductID: products[rng.IntN(len(products))],
			Quantity:  fmt.Sprintf("%d.000", 1+rng.IntN(5)),
		}
	}
	payload, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	return envelope.Encode(envelope.Envelope{EventID: id, EventName: shop.EventOrderPlaced, OccurredAt: at, Payload: payload})
}

// publishing is how every bench message is sent: persistent, JSON.
func publishing(body []byte) amqp.Publishing {
	return amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body}
}

// load publishes bodies to queue through the default exchange on
// `channels` channels in parallel, with publisher confirms (a window of
// unconfirmed messages per channel), and returns once the broker confirmed
// every one.
func load(ctx context.Context, conn *amqp.Connection, queue string, bodies [][]byte, channels int) error {
	const window = 512
	channels = max(channels, 1)
	var wg sync.WaitGroup
	errs := make([]error, channels)
	for k := range channels {
		wg.Go(func() {
			errs[k] = func() error {
				ch, err := conn.Channel()
				if err != nil {
					return err
				}
				defer ch.Close()
				if err := ch.Confirm(false); err != nil {
					return err
				}
				pending := make([]*amqp.DeferredConfirmation, 0, window)
				wait := func(all bool) error {
					for len(pending) > 0 && (all || len(pending) >= window) {
						ok, err := pending[0].WaitContext(ctx)
						if err != nil {
							return err
						}
						if !ok {
							return errors.New("load: broker nacked a publish")
						}
						pending = pending[1:]
					}
					return nil
				}
				for i := k; i < len(bodies); i += channels {
					dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, publishing(bodies[i]))
					if err != nil {
						return err
					}
					pending = append(pending, dc)
					if err := wait(false); err != nil {
						return err
					}
				}
				return wait(true)
			}()
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
