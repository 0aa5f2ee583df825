package dedup

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/platformd/platformd/internal/dbutil"
)

// The dedup step's reading of an error: whose fault it is decides whether
// an event fails alone, the batch is tried again at once, or the batch's
// outcome is unknown. SQLSTATEs are sorted by dbutil.Classify.

// refusedByTable reports whether the dedup insert failed because the table
// refused a row: no partition for it, or the v7 CHECK (23514).
func refusedByTable(err error) bool { return dbutil.CheckViolation(err) }

// conflictCode returns the SQLSTATE of err when it is a deadlock or a
// serialization failure.
func conflictCode(err error) (string, bool) { return dbutil.ConflictCode(err) }

// isEventFault reports whether err rolled back for one event's sake (a
// failing handler, an id the table refused), which its result settles.
func isEventFault(err error) bool {
	var hf *handlerFailure
	var rf *refusal
	return errors.As(err, &hf) || errors.As(err, &rf)
}

// unavailable is implemented by a handler's error that says the handler
// could not answer at all (a remote handler's process unreachable).
type unavailable interface{ HandlerUnavailable() bool }

// infra reports whether err is not the event's fault but the database's or
// the caller's: then the batch's outcome is unknown and nothing is acked.
// A deadline or cancellation of the handler's own (its HTTP call timing
// out) is the handler's failure, retried through the delay queues like
// any other: only the batch's ctx ending, or the connection closed (pgx
// closes it when a query's context ends mid-query), is infrastructure; a
// statement past statement_timeout (57014) is the handler's too.
func infra(ctx context.Context, tx pgx.Tx, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	var u unavailable
	if errors.As(err, &u) && u.HandlerUnavailable() {
		// A remote handler that cannot be reached (refused, timed out,
		// overloaded): no event's fault. The batch is requeued with no
		// attempt counted and the pool waits, as for its database.
		return true
	}
	if tx.Conn() == nil || tx.Conn().IsClosed() {
		return true
	}
	if pgconn.Timeout(err) {
		return true
	}
	return dbutil.Classify(err) == dbutil.FaultInfra
}
