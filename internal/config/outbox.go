package config

import "time"

// Outbox defaults and limits.
const (
	// OutboxBatchSizeDefault is the default outbox.batch_size.
	OutboxBatchSizeDefault = 500
	// OutboxPollDefault is the default outbox.poll.
	OutboxPollDefault = time.Second

	// outboxArchiveMin is the shortest archive period.
	outboxArchiveMin   = time.Hour
	outboxBatchSizeMax = 10_000
	outboxPollMin      = 10 * time.Millisecond
	outboxPollMax      = time.Hour
)

// Choices of outbox.unroutable: what the relay does with a row whose
// event no queue is bound for (the broker returns its message).
const (
	// OutboxUnroutableHold has the broker keep the event: the relay sends
	// it on to the unroutable queue of broker.exchange (package broker,
	// UnroutableQueue), where it waits for an operator to replay it once a
	// consumer exists, and deletes the row after that copy's confirm.
	OutboxUnroutableHold = "hold"
	// OutboxUnroutableDrop deletes the row, as a topic exchange drops what
	// nobody subscribed to; the drop is counted and logged.
	OutboxUnroutableDrop = "drop"
	// OutboxUnroutableDefault is the default outbox.unroutable, the one
	// source of it (the relay's zero value takes it too): a producer often
	// ships before its consumers, and its first events must not be lost
	// nor fill its outbox.
	OutboxUnroutableDefault = OutboxUnroutableHold
)

// OutboxConfig configures a service's outbox relay, which publishes the
// rows of the service's platform.outbox after their writers committed.
type OutboxConfig struct {
	// Relay runs the relay in this daemon (default true, with or without
	// an outbox block: a handler may write to the outbox of any service).
	// One relay per service is active across daemons.
	Relay bool `yaml:"relay"`
	// BatchSize is the most rows published per pass (default 500).
	BatchSize int `yaml:"batch_size"`
	// Poll is how often the relay looks for rows when no notification
	// woke it (default 1s).
	Poll time.Duration `yaml:"poll"`
	// Archive is how long the rows the relay published are kept in
	// platform.outbox_archive for replays, after their publication
	// (default 0: no archive). The scheduler's archive job (every 10
	// minutes) removes the rows past it: whole days by dropping their
	// partitions, the day that straddles the cutoff by batched deletes.
	// Works with database_mode pooler too (replays elect their runner by a
	// lease).
	Archive time.Duration `yaml:"archive"`
	// Unroutable is what the relay does with a row no queue is bound for:
	// OutboxUnroutableHold (the default: the broker keeps the event in the
	// exchange's unroutable queue) or OutboxUnroutableDrop (the row is
	// deleted and counted).
	Unroutable string `yaml:"unroutable"`
	// Configured is true when the service has an outbox block: a producer
	// service, which needs no pools.
	Configured bool `yaml:"-"`
}

// applyOutboxDefaults fills the absent keys of a service's outbox block.
func applyOutboxDefaults(s *ServiceConfig, sp string, isSet func(string) bool) {
	o := &s.Outbox
	o.Configured = isSet(sp + ".outbox")
	if !isSet(sp + ".outbox.relay") {
		o.Relay = true
	}
	if !isSet(sp + ".outbox.batch_size") {
		o.BatchSize = OutboxBatchSizeDefault
	}
	if !isSet(sp + ".outbox.poll") {
		o.Poll = OutboxPollDefault
	}
	if !isSet(sp + ".outbox.unroutable") {
		o.Unroutable = OutboxUnroutableDefault
	}
}

// outbox checks a service's outbox block, and that a service without pools
// is a producer (an outbox block with the relay on).
func (v *validator) outbox(i int, s *ServiceConfig) {
	sp := servicePath(i)
	o := s.Outbox
	if o.BatchSize < 1 || o.BatchSize > outboxBatchSizeMax {
		v.ps.add(sp+".outbox.batch_size", "must be between 1 and %d (got %d)", outboxBatchSizeMax, o.BatchSize)
	}
	if o.Poll < outboxPollMin || o.Poll > outboxPollMax {
		v.ps.add(sp+".outbox.poll", "must be between %s and %s (got %s)", fmtDuration(outboxPollMin), fmtDuration(outboxPollMax), fmtDuration(o.Poll))
	}
	if o.Archive != 0 && o.Archive < outboxArchiveMin {
		v.ps.add(sp+".outbox.archive", "must be 0 (off) or at least %s (got %s)", fmtDuration(outboxArchiveMin), fmtDuration(o.Archive))
	}
	if o.Unroutable != OutboxUnroutableHold && o.Unroutable != OutboxUnroutableDrop {
		v.ps.add(sp+".outbox.unroutable", "must be %s or %s (got %q)", OutboxUnroutableHold, OutboxUnroutableDrop, o.Unroutable)
	}
	if len(s.Pools) > 0 || v.ps.badUnder(sp+".pools") {
		return
	}
	switch {
	case !o.Configured:
		v.ps.add(sp+".pools", "at least one pool is required (a producer service with no pools needs an outbox block, e.g. outbox: {relay: true})")
	case !o.Relay:
		v.ps.add(sp+".outbox.relay", "a service with no pools must run its relay: it would do nothing")
	}
}
