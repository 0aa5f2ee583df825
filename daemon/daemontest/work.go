package daemontest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/dedup"
)

// WorkTimeoutDefault bounds one Work call.
const WorkTimeoutDefault = time.Minute

// Outcome is what the dedup step did with an event.
type Outcome string

// The outcomes of Work.
const (
	// OutcomeProcessed: the id was new and the handler succeeded; its
	// effects and the processed_event row are in the transaction.
	OutcomeProcessed Outcome = "processed"
	// OutcomeDuplicate: the id was already in processed_event; the
	// handler did not run.
	OutcomeDuplicate Outcome = "duplicate"
	// OutcomeFailed: the handler failed; its effects and the
	// processed_event row were rolled back to a savepoint, the rest of
	// the transaction is intact.
	OutcomeFailed Outcome = "failed"
)

// Result is the outcome of one Work call.
type Result struct {
	// Outcome is what the dedup step did.
	Outcome Outcome
	// Err is the handler's error when Outcome is OutcomeFailed.
	Err error
	// Permanent is true when Err is permanent (consumer.Permanent, or a
	// SQLSTATE class 22 or 23 from a SQL or remote handler): the daemon
	// would store the event in its failure store at once instead of
	// retrying it.
	Permanent bool
}

// Work runs the daemon's real dedup step over ev in tx, as a pool
// running the one handler named handler of reg would (River's
// rivertest.Worker shape): it records ev's id in processed_event, calls
// the handler only if the id is new, and on the handler's failure rolls
// the event back to a savepoint, its processed_event row with it. Nothing
// is committed: tx holds the effects, for the test to read and to roll
// back. The service's tables (processed_event among them: `platformd
// migrate` makes it) must be reachable through tx.
//
// The handler's failure is the Result's (Outcome failed, Err); Work's
// error says that the step's outcome is unknown, as when the database
// fails or a remote handler does not answer (a daemon would requeue).
// An unknown handler, or an event without an id, fails t. ev.Delivery's
// RoutingKey defaults to ev.Name. Work is as safe for concurrent use as
// tx is: not at all.
func Work(t testing.TB, tx pgx.Tx, reg *consumer.Registry, handler string, ev consumer.Event) (Result, error) {
	t.Helper()
	r, err := reg.Lookup(handler)
	if err != nil {
		t.Fatalf("daemontest: %v", err)
		return Result{}, err
	}
	if ev.ID == [16]byte{} {
		t.Fatalf("daemontest: the event has no ID: its producer sets it, and the dedup step keys on it")
		return Result{}, fmt.Errorf("daemontest: event without an id")
	}
	if ev.Delivery.RoutingKey == "" {
		ev.Delivery.RoutingKey = ev.Name
	}
	routes, err := dedup.RoutesFor(reg, []string{r.Name})
	if err != nil {
		t.Fatalf("daemontest: %v", err)
		return Result{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), WorkTimeoutDefault)
	defer cancel()
	results, err := dedup.NewProcessorInTx(tx, dedup.ProcessorConfig{Routes: routes, ResolvedBy: "daemontest"}).
		Process(ctx, []consumer.Event{ev})
	if err != nil {
		return Result{}, fmt.Errorf("daemontest: work %s: %w", ev.ID, err)
	}
	res := results[0]
	out := Result{Err: res.Err, Permanent: res.Permanent}
	switch res.Outcome {
	case dedup.OutcomeProcessed:
		out.Outcome = OutcomeProcessed
	case dedup.OutcomeDuplicate:
		out.Outcome = OutcomeDuplicate
	default:
		out.Outcome = OutcomeFailed
	}
	return out, nil
}
