package workers

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/failure"
	"github.com/platformd/platformd/internal/metrics"
)

// failureStore stores a batch's failures (*failure.Store): one
// transaction, committed before any of their deliveries is acked.
type failureStore interface {
	Write(ctx context.Context, entries []failure.Entry) ([]failure.Written, error)
}

var _ failureStore = (*failure.Store)(nil)

// stores reports whether settling m writes a row of the failure store: a
// failure, a parked event, and, in an ordered pool, an event of a key
// going to a retry delay (it blocks its key until it applies); also any
// retry of a copy that settles a stored failure (its row follows it).
func (st *settler) stores(m *message) bool {
	switch m.s.kind {
	case settleFail, settlePark:
		return true
	case settleRetry:
		return m.ev.Delivery.FailureID != uuid.Nil || (st.ordered && m.ev.Delivery.SequenceKey != "")
	}
	return false
}

// storeFailures writes the rows of batch's failures, parked events and
// blocking retries in one transaction. When the write fails, their
// deliveries are requeued: nothing of theirs is acked before its row is
// committed. It reports whether the batch had rows to write.
func (st *settler) storeFailures(ctx context.Context, batch []message) bool {
	var entries []failure.Entry
	var of []*message
	for i := range batch {
		m := &batch[i]
		if !st.stores(m) {
			continue
		}
		entries = append(entries, st.entryOf(m))
		of = append(of, m)
	}
	if len(entries) == 0 {
		return false
	}
	wctx, cancel := context.WithTimeout(ctx, st.timeout)
	written, err := st.store.Write(wctx, entries)
	cancel()
	if err != nil {
		st.log.WarnContext(ctx, "workers: failures not stored, requeueing their deliveries", slog.Int("failures", len(entries)), slog.Any("error", err))
		for _, m := range of {
			m.s.kind = settleRequeue
		}
		return true
	}
	for k, m := range of {
		m.s.failureID = written[k].ID
		if m.s.kind == settleRetry && (written[k].State == failure.StateResolved || written[k].State == failure.StateDiscarded) {
			// An operator discarded it, or another copy applied it, while
			// this one failed: nothing is left to retry.
			m.s.kind = settleFail
		}
		if m.s.kind != settleRetry {
			st.logCopy(ctx, m.s)
		}
	}
	return true
}

// entryOf is m's row of the failure store.
func (st *settler) entryOf(m *message) failure.Entry {
	e := failure.Entry{
		FailureID:   m.ev.Delivery.FailureID,
		Pool:        st.pool,
		EventID:     m.s.eventID,
		EventName:   m.ev.Name,
		RoutingKey:  broker.OriginalRoutingKey(&m.d),
		Headers:     m.d.Headers,
		Body:        m.d.Body,
		Reason:      m.s.reason,
		Error:       m.s.err,
		Handler:     m.s.handler,
		Attempt:     broker.AttemptOf(m.d.Headers),
		SequenceKey: m.ev.Delivery.SequenceKey,
	}
	switch m.s.kind {
	case settleFail:
		e.State = failure.StateFailed
	case settlePark:
		e.State = failure.StateParked
	case settleRetry:
		e.State, e.Reason = failure.StateRetrying, failure.ReasonRetrying
	}
	if e.EventName == "" {
		_, e.EventName = peek(m.d.Body)
	}
	if e.SequenceKey == "" && st.key != nil {
		e.SequenceKey, _ = st.key.text(m.d.Body)
	}
	return e
}

// peek reads event_id and event_name from a body that did not decode as
// an envelope, when it is readable JSON at all (uuid.Nil and "" when not).
func peek(body []byte) (uuid.UUID, string) {
	var v struct { // any: a field of the wrong type must not hide the other
		EventID   any `json:"event_id"`
		EventName any `json:"event_name"`
	}
	if json.Unmarshal(body, &v) != nil {
		return uuid.Nil, ""
	}
	text, _ := v.EventID.(string)
	name, _ := v.EventName.(string)
	id, err := uuid.Parse(text)
	if err != nil {
		id = uuid.Nil
	}
	return id, name
}

// failureIDOf reads the x-failure-id header: the stored failure a copy
// settles (uuid.Nil when absent or not a UUID).
func failureIDOf(h amqp.Table) uuid.UUID {
	s, ok := h[failure.HeaderFailureID].(string)
	if !ok {
		return uuid.Nil
	}
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil
	}
	return id
}

// openRows looks up the unresolved failures of an ordered pool's keys
// (*failure.Store).
type openRows interface {
	OpenRows(ctx context.Context, pool string, keys []string) ([]failure.Open, error)
}

// keepOrder parks, in an ordered pool, every message of batch whose key
// has an unresolved failure before it: stored in an earlier batch (one
// indexed lookup for the batch's keys), or failed at decoding earlier in
// this batch. A message that is the copy of its key's oldest unresolved
// failure (its x-failure-id, or its event id: a redelivery of the head
// itself) runs, and takes that failure's id, so that its transaction
// resolves it. A key's failures are consumed in id (arrival) order: the
// second copy in a batch runs only after the first. The dedup step then
// parks a key's later events when an earlier one fails within the batch.
// An error means the check could not be made: nothing may run.
func keepOrder(ctx context.Context, store openRows, pool string, key *partitionKey, batch []message) error {
	keys := make([]string, 0, len(batch))
	seen := make(map[string]struct{}, len(batch))
	for i := range batch {
		m := &batch[i]
		if m.s.kind != 0 && m.s.kind != settleFail {
			continue
		}
		if m.ev.ID == uuid.Nil && m.s.kind == settleFail {
			continue // did not decode: no key to keep
		}
		k, ok := key.text(m.d.Body)
		if !ok {
			continue
		}
		m.ev.Delivery.SequenceKey = k
		if _, dup := seen[k]; !dup {
			seen[k] = struct{}{}
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	rows, err := store.OpenRows(ctx, pool, keys)
	if err != nil {
		return err
	}
	open := make(map[string][]failure.Open, len(rows))
	for _, r := range rows {
		open[r.SequenceKey] = append(open[r.SequenceKey], r)
	}
	failed := map[string]bool{}
	for i := range batch {
		m := &batch[i]
		k := m.ev.Delivery.SequenceKey
		if k == "" {
			continue
		}
		if !m.runs() {
			failed[k] = true // failed at decoding: the key's later events wait
			continue
		}
		rs := open[k]
		head := -1
		for j := range rs {
			if rs[j].ID == m.ev.Delivery.FailureID || (rs[j].EventID != uuid.Nil && rs[j].EventID == m.ev.ID) {
				head = j
				break
			}
		}
		switch {
		case !failed[k] && head == 0:
			m.ev.Delivery.FailureID = rs[0].ID
			open[k] = rs[1:]
		case !failed[k] && len(rs) == 0:
		default:
			if head > 0 {
				m.ev.Delivery.FailureID = rs[head].ID
				open[k] = append(rs[:head:head], rs[head+1:]...)
			}
			blocker := "an earlier event of the key failing in this batch"
			if len(open[k]) > 0 {
				blocker = "failure " + open[k][0].ID.String()
			}
			m.s = settlement{kind: settlePark, reason: failure.ReasonParked, eventID: m.ev.ID, outcome: metrics.OutcomeRetried,
				err: fmt.Sprintf("parked: key %q waits for %s", k, blocker)}
		}
	}
	return nil
}

// releaseEvery is how often an ordered pool looks for parked events whose
// key's head is resolved.
const releaseEvery = time.Second
