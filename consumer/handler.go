package consumer

import (
	"context"
	"errors"
	"io/fs"

	"github.com/jackc/pgx/v5"
)

// Handler applies one event's effects through tx. It must use tx for every
// database effect so that they commit with the event's processed_event row.
// It returns nil on success, an error to have the event retried, or an error
// wrapped with Permanent when no retry can succeed. A Handler must not commit
// or roll back tx, and must be safe for concurrent use by several workers.
type Handler interface {
	Handle(ctx context.Context, tx pgx.Tx, ev Event) error
}

// BatchHandler is a Handler that can also apply the effects of many events
// at once (one statement over all of them instead of one per event), which
// is where a batch's throughput comes from. platformd calls HandleBatch with
// the new events of a batch, in delivery order, inside the batch's
// transaction. If it fails, the batch is rolled back and replayed event by
// event through Handle, each in a savepoint of its own, so that only the
// events that fail on their own are retried. HandleBatch must therefore have
// exactly the effects of calling Handle for each event in order.
type BatchHandler interface {
	Handler
	HandleBatch(ctx context.Context, tx pgx.Tx, events []Event) error
}

// HandlerFunc adapts a function to the Handler interface.
type HandlerFunc func(ctx context.Context, tx pgx.Tx, ev Event) error

// Handle calls f(ctx, tx, ev).
func (f HandlerFunc) Handle(ctx context.Context, tx pgx.Tx, ev Event) error { return f(ctx, tx, ev) }

// Registration describes one named handler: the event names it handles and
// the migrations its tables need.
type Registration struct {
	// Name is the handler's unique name, referenced by the config
	// (e.g. "stock.reserve").
	Name string
	// Events lists the event names this handler handles.
	Events []string
	// Handler is the code to run.
	Handler Handler
	// Migrations holds goose SQL migrations (NNN_name.sql files at the root
	// of the FS) for the handler's own tables; nil when it needs none. They
	// are applied to every service database whose pools use the handler.
	Migrations fs.FS
}

// permanentError marks an error that no retry can fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent wraps err so that platformd sends the event straight to the
// failure queue (reason "permanent") instead of retrying it. Permanent(nil)
// returns nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or any error it wraps, was marked with
// Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
