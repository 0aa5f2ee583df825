package daemon

import (
	"context"

	"github.com/platformd/platformd/internal/query"

	"github.com/platformd/platformd/internal/outbox"
)

// TestOutboxKillAfterConfirmEnv, set to N > 0, makes a daemon built with
// tag platformd_testhooks SIGKILL itself after its relays' Nth confirmed
// batch, before the batch's rows are deleted: the crash between confirm
// and delete that the chaos suite and the demo provoke for real. It exists
// only for their builds, and such a daemon says so loudly; every other
// build ignores the variable.
const TestOutboxKillAfterConfirmEnv = "PLATFORMD_TEST_OUTBOX_KILL_AFTER_CONFIRM"

// startRelay starts the service's outbox relay when it is on (the
// default), on the daemon's outbox publishing connection.
func (s *service) startRelay(ctx context.Context) error {
	o := s.config().Outbox
	if !o.Relay {
		return nil
	}
	d := s.d
	r, err := outbox.New(outbox.Config{
		Service: s.name, DB: s.db, Broker: d.outboxConn, Exchange: d.cfg.Broker.Exchange,
		BatchSize: o.BatchSize, Poll: o.Poll, MaxBodyBytes: d.cfg.Broker.MaxBodyBytes, Archive: o.Archive > 0,
		Unroutable: o.Unroutable,
		Metrics:    d.metrics, Logger: d.log, Test: outbox.RelayTest{AfterConfirmFunc: d.killHook},
		ControlFunc: s.control,
	})
	if err != nil {
		return err
	}
	return startKept(ctx, s, &s.relay, r)
}

// control runs fn on the service's control session (see package session):
// the relay's and the purge's leases, and an idle relay's look for rows.
func (s *service) control(ctx context.Context, fn func(context.Context, query.Querier) error) error {
	return s.ctl.Do(ctx, func(ctx context.Context, q query.Querier) error { return fn(ctx, q) })
}
