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
	// Handlers are the handlers to run, in that order, as a pool whose
	// handlers list they were would run them; empty: Pool's handlers.
	Handlers []string
	// Service is the service whose database the handlers run against;
	// "" picks the one service that declares or runs them (or Pool's).
	Service string
	// Pool is the pool whose view the try takes (its queue, its retry
	// delays); "" picks the first pool of the service running the first
	// handler.
	Pool string
	// Attempt is the event's attempt (0: its first delivery), as the
	// x-attempt header would say; a retry of a stored failure starts
	// again at 0.
	Attempt int
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
	for _, name := range p.Handlers { // an unknown name first: the list of names helps most
		if _, err := p.Registry.Lookup(name); err != nil {
			return nil, fmt.Errorf("try: %w (handlers: %s)", err, strings.Join(p.Registry.Names(), ", "))
		}
	}
	svc, pool, names, err := resolve(p)
	if err != nil {
		return nil, err
	}
	regs := make([]consumer.Registration, len(names))
	kinds := make([]string, len(names))
	for i, name := range names {
		if regs[i], err = p.Registry.Lookup(name); err != nil {
			return nil, fmt.Errorf("try: %w (handlers: %s)", err, strings.Join(p.Registry.Names(), ", "))
		}
		kinds[i] = kindOf(regs[i].Handler)
	}
	kind := kinds[0]
	for _, k := range kinds[1:] {
		if k != kind {
			kind = strings.Join(kinds, ", ")
			break
		}
	}
	rep := &Report{Service: svc.Name, Handler: strings.Join(names, ", "), Kind: kind, Effects: []Effect{}, Outbox: []OutboxMessage{}, RolledBack: true}
	conn, err := pgx.Connect(ctx, svc.Database)
	if err != nil {
		return nil, fmt.Errorf("try: service %s: connect: %w", svc.Name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, r := range regs {
		if err := prepare(ctx, conn, r.Handler); err != nil {
			return nil, fmt.Errorf("try: handler %s: %w", r.Name, err)
		}
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
		if p.Pool == "" {
			pool = poolOf(svc, names[0], fail.Pool)
		}
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
	if fail == nil {
		ev.Attempt = p.Attempt
	}
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
	if err := work(ctx, tx, p, regs, ev, rep, pool); err != nil {
		return nil, err
	}
	if err := tx.Rollback(ctx); err != nil {
		return nil, fmt.Errorf("try: rollback: %w", err)
	}
	return rep, nil
}

// work runs the dedup step over ev in tx and fills rep.
func work(ctx context.Context, tx pgx.Tx, p Params, regs []consumer.Registration, ev consumer.Event, rep *Report, pool *config.PoolConfig) error {
	if p.IgnoreProcessed {
		tag, err := forgetProcessed.Run(ctx, tx, ev.ID)
		if err != nil {
			return fmt.Errorf("try: %w", notMigrated(err))
		}
		if tag.RowsAffected() > 0 {
			rep.Notes = append(rep.Notes, "the event was already processed: its processed_event row was deleted inside the transaction (-ignore-processed)")
		}
	}
	rec := &recorder{}
	routes := map[string][]dedup.Route{}
	for _, reg := range regs {
		for _, name := range reg.Events {
			h := recordingHandler{inner: reg.Handler, rec: rec, name: reg.Name, label: labeller(reg.Handler), first: len(routes[name]) == 0}
			routes[name] = append(routes[name], dedup.Route{Name: reg.Name, Handler: h})
		}
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
		rep.Calls = append(rep.Calls, callOf(p.Registry, x, ev))
	}
	mu.Unlock()
	if err != nil {
		return stepError(ctx, tx, err, rep)
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
func stepError(ctx context.Context, tx pgx.Tx, err error, rep *Report) error {
	var unavailable *remote.UnavailableError
	switch {
	case errors.As(err, &unavailable):
		rep.Outcome = OutcomeFailed
		rep.Error = &Failure{Class: "unavailable", Handler: unavailable.Handler, Message: unavailable.Error(),
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
	rep.Error = &Failure{Class: "retryable", Message: err.Error(), SQLState: sqlState(err),
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
	f := &Failure{Handler: res.Handler, Message: res.ErrorText(), SQLState: sqlState(res.Err)}
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

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// resolve returns the service, the pool and the handlers p names.
func resolve(p Params) (*config.ServiceConfig, *config.PoolConfig, []string, error) {
	names := p.Handlers
	if p.Pool != "" {
		for i := range p.Config.Services {
			s := &p.Config.Services[i]
			if p.Service != "" && s.Name != p.Service {
				continue
			}
			for j := range s.Pools {
				if pc := &s.Pools[j]; pc.Name == p.Pool {
					if len(names) == 0 {
						names = pc.Handlers
					}
					return s, pc, names, nil
				}
			}
		}
		return nil, nil, nil, fmt.Errorf("try: no pool %q in the configuration", p.Pool)
	}
	if len(names) == 0 {
		return nil, nil, nil, errors.New("try: no handler to run: name handlers or a pool")
	}
	svc, err := serviceOf(p.Config, names[0], p.Service)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, name := range names[1:] {
		if owner := declaredBy(p.Config, name); owner != "" && owner != svc.Name {
			return nil, nil, nil, fmt.Errorf("try: handler %s is service %s's, not %s's", name, owner, svc.Name)
		}
	}
	return svc, poolOf(svc, names[0], ""), names, nil
}

// declaredBy returns the service declaring name as a SQL or remote
// handler, "" when none does (a Go handler).
func declaredBy(cfg *config.Config, name string) string {
	for i := range cfg.Services {
		if declares(&cfg.Services[i], name) {
			return cfg.Services[i].Name
		}
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
	at := envelope.EventTime(ev.ID, ev.OccurredAt)
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
func callOf(reg *consumer.Registry, x remote.Exchange, ev consumer.Event) Call {
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
	var rh *remote.Handler
	if r, err := reg.Lookup(x.Handler); err == nil {
		rh, _ = r.Handler.(*remote.Handler)
	}
	if rh != nil && x.Status == 200 {
		c.Problems = append(c.Problems, rh.CheckAnswer(x.Answer, []consumer.Event{ev})...)
	}
	var bad *remote.BadAnswerError
	if errors.As(x.Err, &bad) && len(c.Problems) == 0 {
		c.Problems = append(c.Problems, bad.Msg)
	}
	return c
}
