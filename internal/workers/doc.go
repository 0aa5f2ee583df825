// Package workers runs platformd's named worker pools over RabbitMQ.
//
// A Pool consumes one queue with Concurrency workers, each on a channel of
// its own (so a multiple ack never crosses workers), gathers deliveries into
// batches, decodes them, runs the dedup step (internal/dedup) for the valid
// ones and settles every delivery only once its outcome is durable:
// processed and duplicate deliveries are acked after the commit; failed ones
// are copied to a retry delay queue or to the failure queue first, with
// publisher confirms and mandatory routing on a publishing connection
// separate from the consuming one, and acked only once the copy is
// confirmed. A batch whose commit outcome is unknown is never acked: it is
// requeued, and its redelivery meets the processed_event row.
//
// amqp091-go does not reconnect safely by itself (its opt-in recovery can
// ack a stale tag on a new channel), so the package runs its own loop with
// backoff and jitter, with fresh connection and channel objects each time,
// and declares the topology again on each new channel. Deliveries of a dead
// channel are never acked on another.
//
// Pause and resume cancel and restart consumption without dropping the work
// in hand; the pause state lives in the service database so it holds
// across restarts and across daemons.
package workers
