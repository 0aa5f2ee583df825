package dedup

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/internal/dbutil"
	"github.com/platformd/platformd/internal/query"
)

// txDB is what a Processor runs its transactions on: a *pgxpool.Pool in
// the daemon, or savepoints of a caller's transaction (NewProcessorInTx).
type txDB interface {
	dbutil.TxStarter
	query.Querier
}

// NewProcessorInTx returns a Processor whose every transaction is a
// savepoint of tx: the very dedup step (the insert into processed_event,
// the handlers in order, the savepoint-per-event replay after a failure,
// the resolution of stored failures), whose "commit" releases its
// savepoint, so that tx holds the effects and the caller decides whether
// they stay. It serves platformd try, which always rolls tx back, and
// package daemontest's Work, which hands tx to a test. The transaction
// options of the step (READ COMMITTED) are then tx's own. It is not safe
// for concurrent use: a transaction runs one statement at a time.
func NewProcessorInTx(tx pgx.Tx, cfg ProcessorConfig) *Processor {
	p := NewProcessor(nil, cfg)
	p.db = savepoints{tx}
	return p
}

// savepoints opens savepoints of a transaction where a Processor opens
// transactions.
type savepoints struct{ pgx.Tx }

// BeginTx opens a savepoint; opts are the enclosing transaction's.
func (s savepoints) BeginTx(ctx context.Context, _ pgx.TxOptions) (pgx.Tx, error) {
	return s.Begin(ctx)
}
