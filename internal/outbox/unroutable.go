package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/metrics"
)

// returnedRow is a row whose message the broker returned: no queue was
// bound for its event name.
type returnedRow struct {
	row   row
	msg   amqp.Publishing
	cause error
}

// settleReturned decides the rows whose messages the broker returned, and
// returns the ids that may now be deleted. With drop, every one: the broker
// dropped the message, as a topic exchange drops what nobody subscribed
// to. With hold, those whose copy the unroutable exchange took (confirmed,
// not returned): the broker keeps the event in the unroutable queue. A copy
// returned in turn (the unroutable queue deleted meanwhile) holds its row
// back with backoff and has the queue declared again; a broker fault keeps
// the rows for the next pass and is returned.
func (r *Relay) settleReturned(ctx context.Context, returned []returnedRow) ([]uuid.UUID, error) {
	gone := make([]uuid.UUID, 0, len(returned))
	if r.cfg.Unroutable == config.OutboxUnroutableDrop {
		for _, rr := range returned {
			gone = append(gone, rr.row.id)
			r.released(ctx, rr.row)
			r.dropped.Inc()
			r.warnUnroutable(ctx, rr.row.name, metrics.UnroutableDropped)
		}
		return gone, nil
	}
	if !r.unroutableDeclared {
		if err := r.declareUnroutable(ctx); err != nil {
			return nil, err
		}
		r.unroutableDeclared = true
	}
	ex := broker.UnroutableExchange(r.cfg.Exchange)
	out := make([]broker.Outgoing, len(returned))
	for i, rr := range returned {
		// The message as it was: body, headers, message id and routing key
		// (the event name), so that a replay from the queue is the original.
		out[i] = broker.Outgoing{Exchange: ex, RoutingKey: rr.row.name, Msg: rr.msg}
	}
	pctx, cancel := context.WithTimeout(ctx, PublishTimeoutDefault)
	errs := r.pub.Publish(pctx, out)
	cancel()
	var pubErr error
	for i, perr := range errs {
		rr := returned[i]
		switch {
		case perr == nil:
			gone = append(gone, rr.row.id)
			r.released(ctx, rr.row)
			r.kept.Inc()
			r.warnUnroutable(ctx, rr.row.name, metrics.UnroutableKept)
		case errors.Is(perr, broker.ErrReturned):
			r.unroutableDeclared = false
			r.hold(ctx, rr.row, metrics.HeldReturned, fmt.Errorf("%w, and so was its copy to %s: %w", rr.cause, ex, perr))
		default:
			pubErr = cmp.Or(pubErr, perr)
		}
	}
	return gone, pubErr
}

// declareUnroutable declares the unroutable exchange and queue of
// broker.exchange, on a channel of its own (a failed declaration closes
// its channel).
func (r *Relay) declareUnroutable(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ch, err := r.cfg.Broker.Channel(dctx)
	if err != nil {
		return fmt.Errorf("outbox: channel to declare the unroutable queue: %w", err)
	}
	defer func() { _ = ch.Close() }()
	if err := broker.DeclareUnroutable(ch, r.cfg.Exchange); err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	return nil
}

// warnUnroutable logs rows of event name that no queue was bound for, at
// most once per WarnEvery per name and outcome, with the count since the
// last line.
func (r *Relay) warnUnroutable(ctx context.Context, name, outcome string) {
	n, log := r.warns.note(outcome+"\x00"+name, time.Now())
	if !log {
		return
	}
	attrs := []any{slog.String("event_name", name), slog.Int("rows", n), slog.Duration("per", r.cfg.WarnEvery)}
	if outcome == metrics.UnroutableKept {
		q := broker.UnroutableQueue(r.cfg.Exchange)
		r.log.WarnContext(ctx, "outbox: no queue is bound for these events; the broker keeps them in the unroutable queue until an operator replays them",
			append(attrs, slog.String("queue", q))...)
		return
	}
	r.log.WarnContext(ctx, "outbox: no queue is bound for these events; their rows were deleted (outbox.unroutable: drop)", attrs...)
}

// warnLimiter lets one log line per key through per interval and counts
// what it held back. It is used by the relay's run goroutine only.
type warnLimiter struct {
	every time.Duration
	keys  map[string]*warnKey
}

type warnKey struct {
	last time.Time // of the last line
	n    int       // events since it
}

// warnKeysMax bounds the keys remembered: past it, the keys whose interval
// has ended are forgotten (their next event logs at once, as it would).
const warnKeysMax = 1024

// note counts one event of key at now and reports whether to log it, with
// the events counted since the key's previous line (this one included).
func (w *warnLimiter) note(key string, now time.Time) (int, bool) {
	if w.keys == nil {
		w.keys = map[string]*warnKey{}
	}
	k, ok := w.keys[key]
	if !ok {
		if len(w.keys) >= warnKeysMax {
			for name, old := range w.keys {
				if now.Sub(old.last) >= w.every {
					delete(w.keys, name)
				}
			}
		}
		k = &warnKey{}
		w.keys[key] = k
	}
	k.n++
	if ok && now.Sub(k.last) < w.every {
		return k.n, false
	}
	n := k.n
	k.last, k.n = now, 0
	return n, true
}
