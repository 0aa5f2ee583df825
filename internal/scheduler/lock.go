package scheduler

import (
	"context"
	"fmt"

	"github.com/platformd/platformd/internal/lease"
)

// PurgeLockName returns the name of service's purge lease in
// platform.lease (package lease): one purger per service across daemons.
func PurgeLockName(service string) string { return "platformd.purge." + service }

// purgeLease returns service's purge lease for one run, its statements run
// by svc.ControlFunc when set (the daemon's control session), else on the
// pool.
func (s *Scheduler) purgeLease(svc *Service) (*lease.Lease, error) {
	l, err := lease.New(lease.Config{
		Name: PurgeLockName(svc.Name), Holder: s.daemon + ":" + lease.DefaultHolder(),
		TTL: svc.LeaseTTL, DB: svc.DB, DoFunc: svc.ControlFunc, Logger: s.logger,
	})
	if err != nil {
		return nil, fmt.Errorf("purge lease: %w", err)
	}
	return l, nil
}

// withPurgeLease runs fn under service's purge lease, or returns a
// *PurgeInProgressError (fn not run) when another holder has it. fn's
// context ends when the lease is lost (not renewed in time): every chunk
// of the purge runs under it, so a purger that lost its lease deletes
// nothing more. The lease is released after fn, even when ctx ended.
func (s *Scheduler) withPurgeLease(ctx context.Context, svc *Service, fn func(ctx context.Context)) error {
	l, err := s.purgeLease(svc)
	if err != nil {
		return err
	}
	ok, err := l.TryAcquire(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return heldElsewhere(ctx, svc.Name, l)
	}
	l.Keep(ctx, fn)
	return nil
}

// heldElsewhere is the refusal of a purge whose lease another holder has,
// naming that holder when it can be read: who it is tells an operator
// whether to wait (a live daemon purging) or for how long (a dead one's
// lease running out). A failed read only loses the detail.
func heldElsewhere(ctx context.Context, service string, l *lease.Lease) error {
	e := &PurgeInProgressError{Service: service}
	if h, ok, err := l.Current(ctx); err == nil && ok {
		e.Holding = h
	}
	return e
}
