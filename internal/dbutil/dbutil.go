// Package dbutil is platformd's one way to run a PostgreSQL transaction:
// begin, run a function, commit, and on any failure roll back with a bounded
// rollback that runs even when the caller's context has ended (River's
// dbutil.WithTx is the model). A transaction left open holds its row locks:
// a processed_event row held by a transaction nobody ends blocks every copy
// of its event until the server's idle_in_transaction_session_timeout.
package dbutil

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// RollbackTimeout bounds a rollback. A rollback runs after the work's own
// context may have ended (cancelled, past its deadline), so it gets a fresh
// deadline of its own; past it, pgx closes the connection, which ends the
// transaction on the server too.
const RollbackTimeout = 5 * time.Second

// TxStarter opens a transaction: *pgxpool.Pool and *pgx.Conn are
// TxStarters.
type TxStarter interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// ReadCommitted is the isolation platformd's transactions run at: under
// READ COMMITTED a concurrent INSERT ... ON CONFLICT DO NOTHING of the same
// id waits for the other transaction and then inserts or not; under
// REPEATABLE READ or SERIALIZABLE the same race fails with 40001.
var ReadCommitted = pgx.TxOptions{IsoLevel: pgx.ReadCommitted}

// Rollback rolls tx back under a context that is not cancelled with ctx and
// expires after RollbackTimeout. Rolling back a transaction already
// committed or rolled back returns pgx.ErrTxClosed, which callers that defer
// Rollback ignore.
func Rollback(ctx context.Context, tx pgx.Tx) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), RollbackTimeout)
	defer cancel()
	return tx.Rollback(ctx)
}

// WithTx runs fn in a transaction opened on db with opts and commits it if
// fn returns nil. If fn fails, or the commit does, the transaction is rolled
// back (see Rollback) and the error returned: fn's as it is, begin and
// commit errors wrapped. A commit error means the outcome is unknown only
// when the connection was lost; pgx reports a transaction the server had
// already aborted as pgx.ErrTxCommitRollback.
func WithTx(ctx context.Context, db TxStarter, opts pgx.TxOptions, fn func(ctx context.Context, tx pgx.Tx) error) error {
	_, err := WithTxV(ctx, db, opts, func(ctx context.Context, tx pgx.Tx) (struct{}, error) {
		return struct{}{}, fn(ctx, tx)
	})
	return err
}

// WithTxV is WithTx for a function that returns a value, returned when the
// commit succeeds (the zero value otherwise).
func WithTxV[T any](ctx context.Context, db TxStarter, opts pgx.TxOptions, fn func(ctx context.Context, tx pgx.Tx) (T, error)) (T, error) {
	var zero T
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return zero, fmt.Errorf("begin: %w", err)
	}
	return finish(ctx, tx, fn)
}

// WithSavepoint runs fn in a savepoint of tx, released if fn returns nil and
// rolled back to otherwise (bounded as Rollback is), so that fn's failure
// undoes fn's work alone and leaves tx usable.
func WithSavepoint(ctx context.Context, tx pgx.Tx, fn func(ctx context.Context, sp pgx.Tx) error) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	_, err = finish(ctx, sp, func(ctx context.Context, sp pgx.Tx) (struct{}, error) {
		return struct{}{}, fn(ctx, sp)
	})
	return err
}

func finish[T any](ctx context.Context, tx pgx.Tx, fn func(ctx context.Context, tx pgx.Tx) (T, error)) (T, error) {
	var zero T
	defer func() { _ = Rollback(ctx, tx) }()
	v, err := fn(ctx, tx)
	if err != nil {
		return zero, err
	}
	if err := tx.Commit(ctx); err != nil {
		return zero, fmt.Errorf("commit: %w", err)
	}
	return v, nil
}
