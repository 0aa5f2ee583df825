package try

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/dbutil"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/failure"
	"github.com/platformd/platformd/internal/remote"
	"github.com/platformd/platformd/internal/sqlhandler"
)

// Params is what Run tries.
type Params struct {
	// Config is the validated configuration; Registry holds every handler
	// it names, Go handlers and the config's SQL and remote handlers
	// alike (the daemon's registry).
	Config   *config.Config
	Registry *consumer.Registry
	// Handler is the handler to run.
	Handler string
	// Service is the service whose database the handler runs against;
	// "" picks the one service that declares or runs the handler.
	Service string
	// Body is the envelope to try (the AMQP body), or nil to take the body
	// of the stored failure FailureID from the service's
	// platform.failed_event (its edited body when an operator edited it).
	Body      []byte
	FailureID uuid.UUID
	// IgnoreProcessed deletes the event's processed_event row, inside the
	// rolled-back transaction, before the dedup step: an event already
	// applied then reaches the handler again.
	IgnoreProcessed bool
}

// ResolvedBy is what the try's transaction records as a resolved
// failure's resolved_by; rolled back, like the rest.
const ResolvedBy = "platformd try"

// Run tries p's event against p's handler, in a transaction of the
// service's database that it always rolls back, and reports what would
// have happened. Its error says that the try could not be made (an
// unknown handler or service, the database unreachable or not migrated,
// a stored failure not found, a statement that does not prepare); the
// handler's own failure is the report's. Run is safe for concurrent use:
// every call has its own connection.
func Run(ctx context.Context, p Params) (*Report, error) {
	reg, err := p.Registry.Lookup(p.Handler)
	if err != nil {
		return nil, fmt.Errorf("try: %w (handlers: %s)", err, strings.Join(p.Registry.Names(), ", "))
	}
	svc, err := serviceOf(p.Config, p.Handler, p.Service)
	if err != nil {
		return nil, err
	}
	rep := &Report{Service: svc.Name, Handler: p.Handler, Kind: kindOf(reg.Handler), Effects: []Effect{}, Outbox: []OutboxMessage{}, RolledBack: true}
	pool := poolOf(svc, p.Handler, "")
	conn, err := pgx.Connect(ctx, svc.Database)
	if err != nil {
		return nil, fmt.Errorf("try: service %s: connect: %w", svc.Name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := prepare(ctx, conn, reg.Handler); err != nil {
		return nil, fmt.Errorf("try: handler %s: %w", p.Handler, err)
	}
	body := p.Body
	var fail *failure.Failure
	if p.FailureID != uuid.Nil {
		if fail, err = storedFailure(ctx, svc.Database, p.FailureID); err != nil {
			return nil, err
		}
		body = fail.Body
		if fail.EditedBody != nil {
			body = fail.EditedBody
		}
		pool = poolOf(svc, p.Handler, fail.Pool)
	}
	if pool != nil {
		rep.Pool = pool.Name
	}
	env, err := envelope.Decode(body, p.Config.Broker.MaxBodyBytes)
	if err != nil {
		rep.Outcome = OutcomeFailed
		rep.Error = &Failure{Class: "permanent", Reason: "decode", Message: err.Error(),
			Settlement: "the pool would store the message in platform.failed_event at once (reason decode), never retried: it is not the envelope"}
		return rep, nil
	}
	ev := eventOf(env, pool, fail)
	rep.Event = &Event{ID: ev.ID.String(), Name: ev.Name, OccurredAt: ev.OccurredAt, Attempt: ev.Attempt,
		RoutingKey: ev.Delivery.RoutingKey, Payload: json.RawMessage(ev.Payload)}
	if fail != nil {
		rep.Event.FailureID = fail.ID.String()
	}
	rep.Notes = append(rep.Notes, horizonNote(svc, ev)...)
	tx, err := conn.BeginTx(ctx, dbutil.ReadCommitted)
	if err != nil {
		return nil, fmt.Errorf("try: service %s: begin: %w", svc.Name, err)
	}
	// Always rolled back: the report is all that leaves the transaction.
	defer func() { _ = dbutil.Rollback(ctx, tx) }()
	if err := work(ctx, tx, p, reg, ev, rep, pool); err != nil {
		return nil, err
	}
	if err := tx.Rollback(ctx); err != nil {
		return nil, fmt.Errorf("try: rollback: %w", err)
	}
	return rep, nil
}

// work runs the dedup step over ev in tx and fills rep.
func work(ctx context.Context, tx pgx.Tx, p Params, reg consumer.Registration, ev consumer.Event, rep *Report, pool *config.PoolConfig) error {
	if p.IgnoreProcessed {
		tag, err := forgetProcessed.Run(ctx, tx, ev.ID)
		if err != nil {
			return fmt.Errorf("try: %w", notMigrated(err))
		}
		if tag.RowsAffected() > 0 {
			rep.Notes = append(rep.Notes, "the event was already processed: its processed_event row was deleted inside the transaction (-ignore-processed)")
		}
	}
	rec := &recorder{handler: reg.Name, label: labeller(reg.Handler)}
	routes := map[string][]dedup.Route{}
	for _, name := range reg.Events {
		routes[name] = []dedup.Route{{Name: reg.Name, Handler: recordingHandler{inner: reg.Handler, rec: rec}}}
	}
	proc := dedup.NewProcessorInTx(tx, dedup.ProcessorConfig{Routes: routes, ResolvedBy: ResolvedBy})
	var mu sync.Mutex
	var calls []remote.Exchange
	cctx := remote.WithExchanges(ctx, func(x remote.Exchange) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, x)
	})
	results, err := proc.Process(cctx, []consumer.Event{ev})
	rep.Effects = append(rep.Effects, rec.list()...)
	mu.Lock()
	for _, x := range calls {
		rep.Calls = append(rep.Calls, callOf(reg.Handler, x, ev))
	}
	mu.Unlock()
	if err != nil {
		return stepError(ctx, tx, err, reg.Name, rep)
	}
	res := results[0]
	switch res.Outcome {
	case dedup.OutcomeProcessed:
		rep.Outcome, rep.WouldApply = OutcomeProcessed, true
		rows, err := writtenOutbox.All(ctx, tx, struct{}{})
		if err != nil {
			return fmt.Errorf("try: %w", err)
		}
		for _, r := range rows {
			rep.Outbox = append(rep.Outbox, OutboxMessage{EventID: r.EventID.String(), EventName: r.EventName,
				Payload: json.RawMessage(r.Payload), Headers: json.RawMessage(r.Headers)})
		}
		if ev.Delivery.FailureID != uuid.Nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("the commit would mark stored failure %s resolved", ev.Delivery.FailureID))
		}
	case dedup.OutcomeDuplicate:
		rep.Outcome = OutcomeDuplicate
	default:
		rep.Outcome = OutcomeFailed
		rep.Error = failureOf(res, ev, pool)
	}
	return nil
}

// stepError reports a dedup step that ended with its batch's outcome
// unknown: a remote handler unreachable is the report's failure (the pool
// would requeue and wait); the database's own trouble is Run's error.
func stepError(ctx context.Context, tx pgx.Tx, err error, handler string, rep *Report) error {
	var unavailable *remote.UnavailableError
	switch {
	case errors.As(err, &unavailable):
		rep.Outcome = OutcomeFailed
		rep.Error = &Failure{Class: "unavailable", Handler: handler, Message: unavailable.Error(),
			Settlement: "nothing applied and no attempt counted: the pool would requeue the batch and wait (state CONNECTING, backing off up to 5s) until the handler answers"}
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("try: %w", ctx.Err())
	case tx.Conn().IsClosed():
		return fmt.Errorf("try: the database connection was lost: %w", err)
	}
	if nm := notMigrated(err); nm != err { //nolint:errorlint // identity: notMigrated returns err itself when it does not apply
		return fmt.Errorf("try: %w", nm)
	}
	rep.Outcome = OutcomeFailed
	rep.Error = &Failure{Class: "retryable", Handler: handler, Message: err.Error(), SQLState: sqlState(err),
		Settlement: "the batch's outcome would be unknown to the dedup step (not the event's fault): nothing acked, the batch requeued, no attempt counted"}
	return nil
}

// notMigrated explains an undefined table: the service's database lacks
// platformd's tables or the handler's; other errors are returned as they are.
func notMigrated(err error) error {
	if sqlState(err) == "42P01" {
		return fmt.Errorf("a table is missing: is the service database migrated (platformd migrate -config F)? %w", err)
	}
	return err
}

// failureOf turns a failed result into what the pool would do with it.
func failureOf(res dedup.Result, ev consumer.Event, pool *config.PoolConfig) *Failure {
	f := &Failure{Handler: res.Handler, Message: errorText(res), SQLState: sqlState(res.Err)}
	var delays []time.Duration
	if pool != nil {
		delays = pool.Retry.Delays
	}
	switch {
	case res.BeyondHorizon:
		f.Class, f.Reason = "permanent", "beyond_horizon"
		f.Settlement = "the pool would store it in platform.failed_event at once (reason beyond_horizon): processed_event refused its id"
	case errors.Is(res.Err, dedup.ErrNoHandler):
		f.Class, f.Reason = "permanent", "no_handler"
		f.Settlement = fmt.Sprintf("handler %s does not handle event %q: a pool would store it in platform.failed_event at once (reason no_handler)",
			res.Handler, ev.Name)
		if f.Handler == "" {
			f.Settlement = fmt.Sprintf("the handler does not handle event %q: a pool would store it in platform.failed_event at once (reason no_handler)", ev.Name)
		}
	case res.Permanent:
		f.Class, f.Reason = "permanent", "permanent"
		f.Settlement = "the pool would store it in platform.failed_event at once (reason permanent), never retried"
	case ev.Attempt < len(delays):
		f.Class = "retryable"
		f.Settlement = fmt.Sprintf("the pool would retry it in %s (attempt %d of %d)", delays[ev.Attempt], ev.Attempt+2, len(delays)+1)
	default:
		f.Class, f.Reason = "retryable", "retries_exhausted"
		f.Settlement = fmt.Sprintf("attempt %d was the last (%d retry delays): the pool would store it in platform.failed_event (reason retries_exhausted)",
			ev.Attempt+1, len(delays))
	}
	return f
}

// errorText is the error as the failure store keeps it: prefixed with the
// failing handler's name once.
func errorText(res dedup.Result) string {
	text := res.Err.Error()
	if res.Handler == "" || strings.HasPrefix(text, res.Handler+": ") {
		return text
	}
	return res.Handler + ": " + text
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// serviceOf returns the service whose database handler runs against:
// name, or the one service declaring the handler or running it in a pool.
func serviceOf(cfg *config.Config, handler, name string) (*config.ServiceConfig, error) {
	var uses []*config.ServiceConfig
	for i := range cfg.Services {
		s := &cfg.Services[i]
		if name != "" {
			if s.Name == name {
				return s, nil
			}
			continue
		}
		if declares(s, handler) || poolOf(s, handler, "") != nil {
			uses = append(uses, s)
		}
	}
	switch {
	case name != "":
		return nil, fmt.Errorf("try: no service %q in the configuration", name)
	case len(uses) == 0:
		return nil, fmt.Errorf("try: no service declares handler %s or runs it in a pool: name its database's service with -service", handler)
	case len(uses) > 1:
		names := make([]string, len(uses))
		for i, s := range uses {
			names[i] = s.Name
		}
		return nil, fmt.Errorf("try: services %s all run handler %s: choose one with -service", strings.Join(names, ", "), handler)
	}
	return uses[0], nil
}

func declares(s *config.ServiceConfig, handler string) bool {
	for _, h := range s.SQLHandlers {
		if h.Name == handler {
			return true
		}
	}
	for _, h := range s.RemoteHandlers {
		if h.Name == handler {
			return true
		}
	}
	return false
}

// poolOf returns the pool named name of s when it runs handler, else the
// first pool of s that runs it; nil when none does.
func poolOf(s *config.ServiceConfig, handler, name string) *config.PoolConfig {
	var first *config.PoolConfig
	for i := range s.Pools {
		pc := &s.Pools[i]
		if !slices.Contains(pc.Handlers, handler) {
			continue
		}
		if pc.Name == name {
			return pc
		}
		if first == nil {
			first = pc
		}
	}
	return first
}

func kindOf(h consumer.Handler) string {
	switch h.(type) {
	case *sqlhandler.Handler:
		return "sql"
	case *remote.Handler:
		return "remote"
	}
	return "go"
}

// prepare prepares a SQL or remote handler's statements, as the daemon
// does at start: one that does not prepare is a configuration error.
func prepare(ctx context.Context, conn *pgx.Conn, h consumer.Handler) error {
	switch h := h.(type) {
	case *sqlhandler.Handler:
		return h.Prepare(ctx, conn.PgConn())
	case *remote.Handler:
		return h.Prepare(ctx, conn.PgConn())
	}
	return nil
}

// labeller names a handler's statements by their SQL text: a SQL
// handler's "statement N", a remote handler's statement names, and the
// outbox inserts platformd makes for them.
func labeller(h consumer.Handler) func(sql string) string {
	names := map[string]string{}
	switch h := h.(type) {
	case *sqlhandler.Handler:
		for i, sql := range h.StatementSQL() {
			names[sql] = fmt.Sprintf("statement %d", i+1)
		}
	case *remote.Handler:
		for name, sql := range h.StatementSQL() {
			names[sql] = "statement " + name
		}
	}
	return func(sql string) string {
		if n, ok := names[sql]; ok {
			return n
		}
		if strings.Contains(sql, "INSERT INTO platform.outbox") {
			return "outbox"
		}
		return ""
	}
}

// storedFailure reads failure id from the service database.
func storedFailure(ctx context.Context, dsn string, id uuid.UUID) (*failure.Failure, error) {
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("try: %w", err)
	}
	pc.MaxConns = 1
	db, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("try: %w", err)
	}
	defer db.Close()
	f, _, err := failure.NewStore(db).Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("try: %w", notMigrated(err))
	}
	return &f, nil
}

// eventOf builds the handler's view of env as pool would deliver it: a
// first delivery by its own name, or the retry of stored failure f (its
// original routing key, attempt reset, the x-replay and x-failure-id
// headers a retry carries).
func eventOf(env envelope.Envelope, pool *config.PoolConfig, f *failure.Failure) consumer.Event {
	ev := consumer.Event{ID: env.EventID, Name: env.EventName, OccurredAt: env.OccurredAt, Payload: env.Payload,
		Delivery: consumer.Delivery{RoutingKey: env.EventName}}
	if pool != nil {
		ev.Delivery.Pool, ev.Delivery.Queue = pool.Name, pool.Queue
	}
	if f != nil {
		if f.RoutingKey != "" {
			ev.Delivery.RoutingKey = f.RoutingKey
		}
		ev.Delivery.Replay = true
		ev.Delivery.FailureID = f.ID
	}
	return ev
}

// horizonNote says when the pool's beyond-horizon guard would stop ev
// before its handler.
func horizonNote(s *config.ServiceConfig, ev consumer.Event) []string {
	at := ev.OccurredAt
	if ev.ID.Version() == 7 {
		sec, nsec := ev.ID.Time().UnixTime()
		at = time.Unix(sec, nsec)
	}
	if s.Horizon <= 0 || time.Since(at) <= s.Horizon {
		return nil
	}
	n := fmt.Sprintf("the event (from %s) is older than service %s's configured horizon (%s)", at.UTC().Format(time.RFC3339), s.Name, s.Horizon)
	if s.BeyondHorizon == config.BeyondHorizonProcess {
		return []string{n + ": beyond_horizon: process lets it through"}
	}
	return []string{n + ": a pool would store it as beyond_horizon without running the handler; the handler was run anyway"}
}

// callOf is the report of one remote call, with every problem of its answer.
func callOf(h consumer.Handler, x remote.Exchange, ev consumer.Event) Call {
	c := Call{URL: x.URL, Status: x.Status, DurationMS: float64(x.Duration.Microseconds()) / 1000, Request: json.RawMessage(x.Request),
		Problems: []string{}}
	if len(x.Answer) > 0 {
		if json.Valid(x.Answer) {
			c.Answer = json.RawMessage(x.Answer)
		} else {
			c.Answer, _ = json.Marshal(string(x.Answer))
		}
	}
	if x.Err != nil {
		c.Error = x.Err.Error()
	}
	rh, ok := h.(*remote.Handler)
	if ok && x.Status == 200 {
		c.Problems = append(c.Problems, rh.CheckAnswer(x.Answer, []consumer.Event{ev})...)
	}
	var bad *remote.BadAnswerError
	if errors.As(x.Err, &bad) && len(c.Problems) == 0 {
		c.Problems = append(c.Problems, bad.Msg)
	}
	return c
}
