// Package replay replays a producer's archived events
// (platform.outbox_archive, docs/replay.md).
//
// Select reads the events a selection matches from the producer's archive
// once; DryRun counts, per target pool, what a copy would do there, with one
// set query per pool against the consuming service's processed_event (read
// only). A real replay is a row of the producer's platform.replay; a Runner
// per producer, active on one daemon at a time, publishes its events in
// event_id order at its rate, in chunks.
//
// The active runner holds the lease LeaseName in the producer's
// platform.lease (package lease), one per database: taken only while a
// replay is running (an idle runner looks for one every Poll, on the
// control session, and holds nothing), renewed every TTL/3, and checked
// before each chunk and again before the chunk's tx.commit, so that a
// runner whose lease may have expired publishes nothing more. Nothing in
// the replay path holds session state (no session lock, no LISTEN, no
// statement prepared beyond a transaction in database_mode pooler): it
// works through a transaction-mode pooler.
//
// The guarantee: no archived event is published twice in one replay, even
// when the daemon is SIGKILLed. Each chunk's copies and a mark (the chunk's
// cursor and counts) go to the broker in one AMQP transaction (tx.select),
// the mark to the replay's own durable journal queue; only after
// tx.commit-ok is the progress recorded in platform.replay, then the marks
// it covers removed from the journal. A daemon that dies before the commit-ok leaves nothing
// of the chunk (the broker rolls back a transaction whose channel closes),
// or, if the commit went through, leaves its mark: the runner that resumes
// reads the journal first and records a mark past the database's cursor
// instead of publishing that chunk again. The progress is recorded under
// the lease (lease.Fence, in the same transaction): a runner that lost its
// lease after a commit records nothing and leaves the chunk's mark to its
// successor, and a runner clears from the journal only the marks its
// recorded cursor covers. Outside the guarantee: a tx.commit sent just
// before the lease's local deadline and held up in the network past the
// lease's expiry and the successor's read of the journal (its chunk is
// then published twice: duplicates the consumers skip), the broker itself
// losing a committed transaction (a RabbitMQ node crash), and a
// journal queue that expired (unused for a week).
package replay
