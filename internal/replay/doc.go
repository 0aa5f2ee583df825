// Package replay replays a producer's archived events
// (platform.outbox_archive, DESIGN.md "Archive and replay").
//
// Select reads the events a selection matches from the producer's archive
// once; DryRun counts, per target pool, what a copy would do there, with one
// set query per pool against the consuming service's processed_event (read
// only). A real replay is a row of the producer's platform.replay; a Runner
// per producer, active on one daemon at a time (an advisory lock held by a
// dedicated session, as the outbox relay's), publishes its events in
// event_id order at its rate, in chunks.
//
// The guarantee: no archived event is published twice in one replay, even
// when the daemon is SIGKILLed. Each chunk's copies and a mark (the chunk's
// cursor and counts) go to the broker in one AMQP transaction (tx.select),
// the mark to the replay's own durable journal queue; only after
// tx.commit-ok is the progress recorded in platform.replay, then the
// journal emptied. A daemon that dies before the commit-ok leaves nothing
// of the chunk (the broker rolls back a transaction whose channel closes),
// or, if the commit went through, leaves its mark: the runner that resumes
// reads the journal first and records a mark past the database's cursor
// instead of publishing that chunk again. Outside the guarantee: the broker
// itself losing a committed transaction (a RabbitMQ node crash), and a
// journal queue that expired (unused for a week).
package replay
