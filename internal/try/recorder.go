package try

import (
	"context"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/platformd/platformd/consumer"
)

// recorder keeps the statements a handler ran, in order. A handler runs
// on one goroutine at a time, but a recorder is locked all the same: a Go
// handler may hand its transaction to a goroutine of its own.
type recorder struct {
	mu      sync.Mutex
	effects []Effect
}

// reset forgets what an earlier call of the handler recorded: the dedup
// step may run a handler again (a batch tried again after a deadlock),
// and only the last run is what would commit.
func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.effects = nil
}

func (r *recorder) add(h *recordingHandler, sql string, args []any, tag pgconn.CommandTag, err error) {
	e := Effect{Handler: h.name, SQL: strings.TrimSpace(sql), Args: formatArgs(args)}
	if h.label != nil {
		e.Statement = h.label(sql)
	}
	if err != nil {
		e.Error = errorOf(err)
	} else {
		e.Command = tag.String()
		e.Rows = tag.RowsAffected()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.effects = append(r.effects, e)
}

func (r *recorder) list() []Effect {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Effect(nil), r.effects...)
}

// recordingHandler runs a handler with a transaction that records every
// statement it runs. It is not a BatchHandler: try runs one event, which
// the dedup step hands to Handle either way.
type recordingHandler struct {
	inner consumer.Handler
	rec   *recorder
	name  string
	// label names a statement by its SQL text (a SQL handler's "statement
	// 2", a remote handler's statement name), "" when unknown.
	label func(sql string) string
	// first is set on the event's first handler: a new run of the event's
	// handlers starts there.
	first bool
}

func (h recordingHandler) Handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	if h.first {
		h.rec.reset()
	}
	return h.inner.Handle(ctx, &recordingTx{Tx: tx, h: &h}, ev)
}

// recordingTx is a pgx.Tx that records the command tag of every statement
// run through it: Exec, Query and QueryRow (when their rows are read),
// SendBatch (each queued statement), CopyFrom, and the same in its
// savepoints. What a handler runs through tx.Conn() is not seen.
type recordingTx struct {
	pgx.Tx
	h *recordingHandler
}

func (t *recordingTx) Begin(ctx context.Context) (pgx.Tx, error) {
	sp, err := t.Tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &recordingTx{Tx: sp, h: t.h}, nil
}

func (t *recordingTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := t.Tx.Exec(ctx, sql, args...)
	t.h.rec.add(t.h, sql, args, tag, err)
	return tag, err
}

func (t *recordingTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := t.Tx.Query(ctx, sql, args...)
	if err != nil {
		t.h.rec.add(t.h, sql, args, pgconn.CommandTag{}, err)
		return rows, err
	}
	return &recordingRows{Rows: rows, done: func(tag pgconn.CommandTag, err error) { t.h.rec.add(t.h, sql, args, tag, err) }}, nil
}

func (t *recordingTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := t.Query(ctx, sql, args...)
	return &recordingRow{rows: rows, err: err}
}

func (t *recordingTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	n, err := t.Tx.CopyFrom(ctx, table, columns, src)
	sql := "COPY " + table.Sanitize() + " (" + strings.Join(columns, ", ") + ") FROM STDIN"
	t.h.rec.add(t.h, sql, nil, pgconn.NewCommandTag(fmt.Sprintf("COPY %d", n)), err)
	return n, err
}

func (t *recordingTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return &recordingBatch{BatchResults: t.Tx.SendBatch(ctx, b), queued: b.QueuedQueries, h: t.h}
}

// recordingRows records its command tag once, when its rows are all read
// or it is closed.
type recordingRows struct {
	pgx.Rows
	done     func(pgconn.CommandTag, error)
	recorded bool
}

func (r *recordingRows) finish() {
	if !r.recorded {
		r.recorded = true
		r.done(r.Rows.CommandTag(), r.Rows.Err())
	}
}

func (r *recordingRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.finish()
	return false
}

func (r *recordingRows) Close() {
	r.Rows.Close()
	r.finish()
}

// recordingRow is QueryRow's row, read as pgx reads it: the first row
// scanned, the rest discarded, pgx.ErrNoRows when there is none.
type recordingRow struct {
	rows pgx.Rows
	err  error
}

func (r *recordingRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// recordingBatch records each queued statement's tag as it is read.
type recordingBatch struct {
	pgx.BatchResults
	queued []*pgx.QueuedQuery
	next   int
	h      *recordingHandler
}

func (b *recordingBatch) query() (string, []any) {
	k := b.next
	b.next++
	if k < len(b.queued) {
		return b.queued[k].SQL, b.queued[k].Arguments
	}
	return "", nil
}

func (b *recordingBatch) Exec() (pgconn.CommandTag, error) {
	sql, args := b.query()
	tag, err := b.BatchResults.Exec()
	b.h.rec.add(b.h, sql, args, tag, err)
	return tag, err
}

func (b *recordingBatch) Query() (pgx.Rows, error) {
	sql, args := b.query()
	rows, err := b.BatchResults.Query()
	if err != nil {
		b.h.rec.add(b.h, sql, args, pgconn.CommandTag{}, err)
		return rows, err
	}
	return &recordingRows{Rows: rows, done: func(tag pgconn.CommandTag, err error) { b.h.rec.add(b.h, sql, args, tag, err) }}, nil
}

// Close reads the results not read yet, so that they are recorded too (a
// handler may close a batch without reading it), up to the first error,
// which pgx's Close returns as well.
func (b *recordingBatch) Close() error {
	var first error
	for b.next < len(b.queued) {
		if _, err := b.Exec(); err != nil {
			first = err
			break
		}
	}
	if err := b.BatchResults.Close(); err != nil {
		return err
	}
	return first
}

func (b *recordingBatch) QueryRow() pgx.Row {
	rows, err := b.Query()
	return &recordingRow{rows: rows, err: err}
}

// formatArgs renders a statement's arguments for a reader: UUIDs as
// UUIDs, bytes as text when they are UTF-8, times in RFC 3339, NULL.
func formatArgs(args []any) []string {
	if len(args) == 0 {
		return nil
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = formatArg(a)
	}
	return out
}

func formatArg(a any) string {
	switch v := a.(type) {
	case nil:
		return "NULL"
	case [16]byte:
		return uuid.UUID(v).String()
	case uuid.UUID:
		return v.String()
	case []byte:
		if utf8.Valid(v) {
			return string(v)
		}
		return `\x` + hex.EncodeToString(v)
	case time.Time:
		return v.Format(time.RFC3339Nano)
	case string:
		return v
	case driver.Valuer:
		if dv, err := v.Value(); err == nil {
			if _, again := dv.(driver.Valuer); !again {
				return formatArg(dv)
			}
		}
		return fmt.Sprintf("%v", v)
	case fmt.Stringer:
		return v.String()
	default:
		return fmt.Sprintf("%v", v)
	}
}

// errorOf is a statement's error as a reader wants it: PostgreSQL's code,
// message and detail when it raised it.
func errorOf(err error) string {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err.Error()
	}
	msg := pe.Code + " " + pe.Message
	if pe.Detail != "" {
		msg += " (detail: " + pe.Detail + ")"
	}
	return msg
}
