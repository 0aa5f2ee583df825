package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/platformd/platformd/internal/broker"
	amqp "github.com/rabbitmq/amqp091-go"
)

// journalExpires is how long the broker keeps a replay's journal queue
// unused (a replay left running on a daemon down that long republishes at
// most the chunk it was committing when it died).
const journalExpires = 7 * 24 * time.Hour

// journalQueue is the name of a replay's journal queue.
func journalQueue(id uuid.UUID) string { return "platformd.replay." + id.String() }

// mark is a chunk's journal entry: what the chunk advanced, published in
// the same AMQP transaction as the chunk's copies, so that the broker holds
// the mark if and only if it holds the copies.
type mark struct {
	Cursor    uuid.UUID        `json:"cursor"`
	Published int64            `json:"published"`
	Pools     map[string]int64 `json:"pools,omitempty"`
}

// txChannel publishes chunks in AMQP transactions (tx.select): a chunk's
// copies and its mark are committed together or not at all (a channel
// closed before tx.commit-ok, by a dead daemon, rolls them back).
type txChannel struct {
	conn *broker.Conn
	tx   *broker.KeptChannel // in tx mode
}

func newTxChannel(conn *broker.Conn) *txChannel {
	return &txChannel{conn: conn, tx: broker.NewKeptChannel(conn, "replay", func(ch *amqp.Channel) error {
		if err := ch.Tx(); err != nil {
			return fmt.Errorf("tx.select: %w", err)
		}
		return nil
	})}
}

func (c *txChannel) close() { c.tx.Close() }

// declareJournal declares the replay's journal queue (durable, expiring
// when unused).
func (c *txChannel) declareJournal(ctx context.Context, id uuid.UUID) error {
	ch, err := c.tx.Get(ctx)
	if err != nil {
		return err
	}
	_, err = ch.QueueDeclare(journalQueue(id), true, false, false, false,
		amqp.Table{"x-expires": journalExpires.Milliseconds(), "x-queue-type": "classic"})
	if err != nil {
		c.close()
		return fmt.Errorf("replay: declare journal: %w", err)
	}
	return nil
}

// lastMark reads the journal's marks and returns the furthest (nil when
// empty); the marks stay until clearJournal.
func (c *txChannel) lastMark(ctx context.Context, id uuid.UUID) (*mark, error) {
	ch, err := c.conn.Channel(ctx) // a plain channel: basic.get outside the transaction
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	defer ch.Close()
	var last *mark
	for {
		d, ok, err := ch.Get(journalQueue(id), false)
		if err != nil {
			return nil, fmt.Errorf("replay: read journal: %w", err)
		}
		if !ok {
			return last, nil // unacked: back in the queue when ch closes
		}
		var m mark
		if err := json.Unmarshal(d.Body, &m); err != nil {
			return nil, fmt.Errorf("replay: journal mark: %w", err)
		}
		if last == nil || compareUUID(m.Cursor, last.Cursor) > 0 {
			last = &m
		}
	}
}

// clearJournal removes the journal's marks up to upTo (the cursor just
// recorded in the database), and leaves any past it: a runner that lost
// its lease and clears late must not remove the marks of the chunks its
// successor committed and has not recorded yet. Each mark is read
// unacknowledged, those recorded are acked, and closing the channel puts
// the others back.
func (c *txChannel) clearJournal(ctx context.Context, id uuid.UUID, upTo uuid.UUID) error {
	ch, err := c.conn.Channel(ctx)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	defer ch.Close()
	for {
		d, ok, err := ch.Get(journalQueue(id), false)
		if err != nil {
			return fmt.Errorf("replay: clear journal: %w", err)
		}
		if !ok {
			return nil
		}
		var m mark
		if json.Unmarshal(d.Body, &m) != nil || compareUUID(m.Cursor, upTo) > 0 {
			continue // back in the queue when ch closes
		}
		if err := d.Ack(false); err != nil {
			return fmt.Errorf("replay: clear journal: %w", err)
		}
	}
}

// deleteJournal removes a finished replay's journal.
func (c *txChannel) deleteJournal(ctx context.Context, id uuid.UUID) {
	ch, err := c.conn.Channel(ctx)
	if err != nil {
		return
	}
	defer ch.Close()
	_, _ = ch.QueueDelete(journalQueue(id), false, false, false)
}

// publish sends out and m in one transaction; nil means the broker
// committed both. check runs before tx.commit: its error rolls the
// transaction back (the channel is closed) and is returned.
func (c *txChannel) publish(ctx context.Context, id uuid.UUID, out []broker.Outgoing, m mark, check func() error) error {
	ch, err := c.tx.Get(ctx)
	if err != nil {
		return err
	}
	fail := func(err error) error {
		c.close() // the transaction dies with the channel
		return err
	}
	for _, o := range out {
		if err := ch.PublishWithContext(ctx, o.Exchange, o.RoutingKey, false, false, o.Msg); err != nil {
			return fail(fmt.Errorf("replay: publish: %w", err))
		}
	}
	body, err := json.Marshal(m)
	if err != nil {
		return fail(err)
	}
	if err := ch.PublishWithContext(ctx, "", journalQueue(id), false, false,
		amqp.Publishing{DeliveryMode: amqp.Persistent, ContentType: "application/json", Body: body}); err != nil {
		return fail(fmt.Errorf("replay: publish mark: %w", err))
	}
	if err := check(); err != nil {
		return fail(err)
	}
	if err := ch.TxCommit(); err != nil {
		return fail(fmt.Errorf("replay: tx.commit: %w", err))
	}
	return nil
}
