package failure

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/internal/dbpool"
	"github.com/platformd/platformd/internal/dbutil"
	"github.com/platformd/platformd/internal/query"
)

// Store reads and writes one service database's failures. It is safe for
// concurrent use.
type Store struct {
	db dbpool.DB
}

// NewStore returns the store of the service database db.
func NewStore(db dbpool.DB) *Store { return &Store{db: db} }

// DB returns the service database the store is over.
func (s *Store) DB() dbpool.DB { return s.db }

// Entry is one delivery's failure as the workers write it.
type Entry struct {
	// FailureID is the row the delivery's copy settles (its x-failure-id,
	// or the open row an ordered pool matched it to); uuid.Nil for a
	// first failure.
	FailureID uuid.UUID
	Pool      string
	// EventID is uuid.Nil when the body did not decode.
	EventID               uuid.UUID
	EventName, RoutingKey string
	Headers               map[string]any
	Body                  []byte
	// Reason is one of broker.Reason… or Reason…; State is the row's
	// state after this write (StateFailed, StateParked, StateRetrying).
	Reason, State string
	Error         string
	Handler       string
	Attempt       int
	// SequenceKey is the pool's partition_key value ("": none).
	SequenceKey string
}

// Written is what Write made of one entry: its row's id and the row's
// state after the write (a row already resolved or discarded keeps that
// state, and only counts the copy).
type Written struct {
	ID    uuid.UUID
	State string
}

// Key returns the failure key of a message of pool: its event id, or the
// body's SHA-256 when it has none, so that copies of one failure are one
// row.
func Key(eventID uuid.UUID, body []byte) string {
	if eventID != uuid.Nil {
		return eventID.String()
	}
	sum := sha256.Sum256(body)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Write stores entries in one transaction and returns what became of each,
// in order. A copy of a failure already stored (same pool and key, or the
// row its FailureID names) updates that row: copies counted, reason,
// error, attempt and state replaced, unless the row is resolved or
// discarded (then only the copy is counted). Nothing is stored when it
// fails: the caller must not ack.
func (s *Store) Write(ctx context.Context, entries []Entry) ([]Written, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	out, err := dbutil.WithTxV(ctx, s.db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) ([]Written, error) {
		out := make([]Written, len(entries))
		for i := range entries {
			w, err := write(ctx, tx, &entries[i])
			if err != nil {
				return nil, err
			}
			out[i] = w
		}
		return out, nil
	})
	if err != nil {
		return nil, fmt.Errorf("failure: write %d: %w", len(entries), err)
	}
	return out, nil
}

// write stores one entry in tx.
func write(ctx context.Context, tx pgx.Tx, e *Entry) (Written, error) {
	headers, err := json.Marshal(jsonHeaders(e.Headers))
	if err != nil {
		return Written{}, fmt.Errorf("headers of %s: %w", e.EventID, err)
	}
	p := writeParams{Entry: e, Headers: headers, Fingerprint: Fingerprint(e.Error)}
	if e.FailureID != uuid.Nil {
		w, found, err := updateByID.Find(ctx, tx, p)
		if err != nil || found {
			return w, err
		}
		// The row is gone (past retention) or the header was not ours: a
		// first failure, then.
	}
	p.ID = uuid.Must(uuid.NewV7())
	p.Key = Key(e.EventID, e.Body)
	return upsert.One(ctx, tx, p)
}

type writeParams struct {
	*Entry
	ID          uuid.UUID
	Key         string
	Headers     []byte
	Fingerprint string
}

func (w *Written) dest() []any { return []any{&w.ID, &w.State} }

func nullUUID(id uuid.UUID) any {
	if id == uuid.Nil {
		return nil
	}
	return id
}

func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// jsonHeaders makes AMQP header values JSON-friendly: times as RFC 3339,
// nested tables as objects; byte slices as text when they are UTF-8.
func jsonHeaders(h map[string]any) map[string]any {
	out := make(map[string]any, len(h))
	for k, v := range h {
		out[k] = jsonValue(v)
	}
	return out
}

func jsonValue(v any) any {
	switch x := v.(type) {
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case map[string]any:
		return jsonHeaders(x)
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = jsonValue(x[i])
		}
		return out
	case []byte:
		return string(x)
	}
	return v
}

// Open is an unresolved row of an ordered pool's key: failed, parked or
// retrying.
type Open struct {
	ID          uuid.UUID
	SequenceKey string
	EventID     uuid.UUID
	State       string
}

func (o *Open) dest() []any { return []any{&o.ID, &o.SequenceKey, &o.EventID, &o.State} }

type openParams struct {
	Pool string
	Keys []string
}

// OpenRows returns the unresolved rows of pool's keys, by key then id
// (arrival order): one indexed lookup, the ordered pools' check per batch.
func (s *Store) OpenRows(ctx context.Context, pool string, keys []string) ([]Open, error) {
	rows, err := openRows.All(ctx, s.db, openParams{Pool: pool, Keys: keys})
	if err != nil {
		return nil, fmt.Errorf("failure: open rows of %s: %w", pool, err)
	}
	return rows, nil
}

type resolveParams struct {
	IDs []uuid.UUID
	By  string
}

// Resolve marks the rows ids resolved by by, through q: the dedup step
// calls it in the transaction that applies their copies (or finds them
// duplicates), so a row is resolved exactly when, and only if, that
// transaction commits. Rows already resolved or discarded are left as
// they are.
func Resolve(ctx context.Context, q query.Querier, ids []uuid.UUID, by string) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := resolve.Run(ctx, q, resolveParams{IDs: ids, By: by}); err != nil {
		return fmt.Errorf("failure: resolve %d: %w", len(ids), err)
	}
	return nil
}
