package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/connbudget"
	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/migrate"
	"github.com/platformd/platformd/internal/remote"
	"github.com/platformd/platformd/internal/sqlhandler"
)

// WithSQLHandlers returns a registry holding reg's handlers and, after
// them, a registration for every SQL handler of cfg, so that the pools,
// the dedup routes and the migrations see both kinds alike. reg is left
// as it is; without SQL handlers it is returned itself. cfg must have been
// validated (names are unique, statements parse).
func WithSQLHandlers(cfg *config.Config, reg *consumer.Registry) (*consumer.Registry, error) {
	var sqlRegs []consumer.Registration
	for _, s := range cfg.Services {
		for _, hc := range s.SQLHandlers {
			h, err := sqlhandler.New(hc.Name, hc.Statements())
			if err != nil {
				return nil, fmt.Errorf("%s: %w", hc.KeyPath(), err)
			}
			sqlRegs = append(sqlRegs, consumer.Registration{Name: hc.Name, Events: hc.Events, Handler: h})
		}
		for _, hc := range s.RemoteHandlers {
			h, err := newRemoteHandler(s, hc)
			if err != nil {
				return nil, err
			}
			sqlRegs = append(sqlRegs, consumer.Registration{Name: hc.Name, Events: hc.Events, Handler: h})
		}
	}
	if len(sqlRegs) == 0 {
		return reg, nil
	}
	out := consumer.NewRegistry()
	for _, name := range reg.Names() {
		r, err := reg.Lookup(name)
		if err != nil {
			return nil, err
		}
		if err := out.Register(r); err != nil {
			return nil, err
		}
	}
	for _, r := range sqlRegs {
		if err := out.Register(r); err != nil {
			return nil, fmt.Errorf("sql handlers: %w", err)
		}
	}
	return out, nil
}

// withServiceSet inserts the service's own migrations (services[].migrations)
// into sets, right after the platform's: the service's tables exist before
// any handler's migrations and before its SQL handlers are prepared.
func withServiceSet(s config.ServiceConfig, sets []migrate.Set) []migrate.Set {
	if s.Migrations == "" {
		return sets
	}
	set := migrate.ServiceSet(s.Name, os.DirFS(s.Migrations))
	return append([]migrate.Set{sets[0], set}, sets[1:]...)
}

// prepareSQLHandlers prepares every statement of the service's SQL
// handlers against its database, so that a statement naming a missing
// column stops the daemon at start (with the statement's key path and
// PostgreSQL's message) instead of failing its first event. It prepares
// the handlers of reg, those the pools run, which also decides whether
// each may run its statement once per batch (logged). The returned error
// wraps PostgreSQL's when the database answered. Its connection is under
// budget (nil: none).
func prepareSQLHandlers(ctx context.Context, s config.ServiceConfig, reg *consumer.Registry, budget *connbudget.Budget, logger *slog.Logger) error {
	if len(s.SQLHandlers) == 0 && len(s.RemoteHandlers) == 0 {
		return nil
	}
	cc, err := pgx.ParseConfig(s.Database)
	if err != nil {
		return fmt.Errorf("prepare SQL handlers: %w", err)
	}
	cc.DialFunc = budget.Wrap(cc.DialFunc)
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("prepare SQL handlers: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := prepareRemoteHandlers(ctx, s, reg, conn, logger); err != nil {
		return err
	}
	for _, hc := range s.SQLHandlers {
		h, err := configHandler[*sqlhandler.Handler](reg, hc.Name, hc.KeyPath(), "SQL")
		if err != nil {
			return err
		}
		if err := h.Prepare(ctx, conn.PgConn()); err != nil {
			var perr *sqlhandler.PrepareError
			if errors.As(err, &perr) {
				return &keyPathError{path: fmt.Sprintf("%s.sql[%d]", hc.KeyPath(), perr.Statement), err: err}
			}
			return &keyPathError{path: hc.KeyPath(), err: err}
		}
		if on, why := h.BatchMode(); on {
			logger.InfoContext(ctx, "daemon: SQL handler runs its statement once per batch",
				slog.String("service", s.Name), slog.String("handler", hc.Name))
		} else {
			logger.InfoContext(ctx, "daemon: SQL handler runs its statements event by event, in one pipeline per batch",
				slog.String("service", s.Name), slog.String("handler", hc.Name), slog.String("reason", why))
		}
	}
	return nil
}

// configHandler returns the handler the config declares as name, which
// reg holds as an H (kind names H in the error: "SQL", "remote"); its
// errors are keyPathErrors at keyPath.
func configHandler[H consumer.Handler](reg *consumer.Registry, name, keyPath, kind string) (H, error) {
	var zero H
	r, err := reg.Lookup(name)
	if err != nil {
		return zero, &keyPathError{path: keyPath, err: err}
	}
	h, ok := r.Handler.(H)
	if !ok {
		return zero, &keyPathError{path: keyPath, err: fmt.Errorf("handler %q is not the config's %s handler", name, kind)}
	}
	return h, nil
}

// keyPathError is an error about the config key at path (a statement that
// does not prepare): "<path>: <err>".
type keyPathError struct {
	path string
	err  error
}

func (e *keyPathError) Error() string { return e.path + ": " + e.err.Error() }
func (e *keyPathError) Unwrap() error { return e.err }

// CheckRemoteSQL implements config.RemoteSQLChecker: config.Load refuses,
// at its key path, a remote handler's statement sqlhandler.ParseRemote
// refuses.
func (c Catalog) CheckRemoteSQL(statement string) error {
	_, err := sqlhandler.ParseRemote(statement)
	return err
}

// CheckSQL implements config.SQLChecker: config.Load refuses, at its key
// path, a statement sqlhandler.Parse refuses.
func (c Catalog) CheckSQL(statement string) error {
	_, err := sqlhandler.Parse(statement)
	return err
}

// newRemoteHandler builds the remote handler hc of service s, its
// connections sized to the concurrency of the pools that run it.
func newRemoteHandler(s config.ServiceConfig, hc config.RemoteHandlerConfig) (*remote.Handler, error) {
	conns := 0
	for _, p := range s.Pools {
		if slices.Contains(p.Handlers, hc.Name) {
			conns += p.Concurrency
		}
	}
	stmts := make(map[string]string, len(hc.Statements))
	for name, st := range hc.Statements {
		stmts[name] = string(st)
	}
	h, err := remote.New(remote.Config{
		Service: s.Name, Name: hc.Name, URL: hc.URL, Timeout: hc.Timeout, Headers: hc.Headers,
		CAFile: hc.TLS.CAFile, CertFile: hc.TLS.CertFile, KeyFile: hc.TLS.KeyFile,
		Statements: stmts, MaxConns: max(conns, hc.MaxInFlight),
		MaxInFlight: hc.MaxInFlight, Adaptive: hc.Concurrency == config.RemoteConcurrencyAdaptive,
	})
	if err != nil {
		return nil, remoteKeyPathError(hc, err)
	}
	return h, nil
}

// remoteKeyPathError places err, about remote handler hc, at hc's key path,
// or at its statement's ("...statements.open_invoice") when it is about one.
func remoteKeyPathError(hc config.RemoteHandlerConfig, err error) error {
	var serr *remote.StatementError
	if errors.As(err, &serr) {
		return &keyPathError{path: hc.KeyPath() + ".statements." + serr.Name, err: serr.Err}
	}
	return &keyPathError{path: hc.KeyPath(), err: err}
}

// prepareRemoteHandlers prepares every statement of the service's remote
// handlers on conn, as prepareSQLHandlers does for SQL handlers': a
// statement that does not prepare stops migrate and run with its key path
// ("...remote_handlers[0].statements.open_invoice") and PostgreSQL's
// message.
func prepareRemoteHandlers(ctx context.Context, s config.ServiceConfig, reg *consumer.Registry, conn *pgx.Conn, logger *slog.Logger) error {
	for _, hc := range s.RemoteHandlers {
		h, err := configHandler[*remote.Handler](reg, hc.Name, hc.KeyPath(), "remote")
		if err != nil {
			return err
		}
		if err := h.Prepare(ctx, conn.PgConn()); err != nil {
			return remoteKeyPathError(hc, err)
		}
		logger.InfoContext(ctx, "daemon: remote handler prepared", slog.String("service", s.Name), slog.String("handler", hc.Name),
			slog.Any("once_per_batch", h.BatchStatements()))
	}
	return nil
}

// instrumentRemoteHandlers gives the remote handlers among names the
// daemon's metrics and tracer.
func instrumentRemoteHandlers(reg *consumer.Registry, names []string, m *metrics.Metrics, tracer trace.Tracer) {
	for _, name := range names {
		if r, err := reg.Lookup(name); err == nil {
			if h, ok := r.Handler.(*remote.Handler); ok {
				h.Instrument(m, tracer)
			}
		}
	}
}

// closeRemoteHandlers closes the idle connections of the remote handlers
// among names (their pools stopped); a later call opens new ones.
func closeRemoteHandlers(reg *consumer.Registry, names []string) {
	for _, name := range names {
		if r, err := reg.Lookup(name); err == nil {
			if h, ok := r.Handler.(*remote.Handler); ok {
				h.Close()
			}
		}
	}
}
