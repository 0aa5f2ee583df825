// Package workers runs platformd's named worker pools over RabbitMQ.
//
// A Pool consumes one queue with Concurrency workers, each on a channel of
// its own (so a multiple ack never crosses workers), gathers deliveries into
// batches, decodes them, runs the dedup step (internal/dedup) for the valid
// ones and settles every delivery only once its outcome is durable:
// processed and duplicate deliveries are acked after the commit; failed ones
// are copied to the shared retry delay queue of their next delay (routed
// back to the pool's queue by its name) or stored as failures first, with
// publisher confirms and mandatory routing on a publishing connection
// separate from the consuming one, and acked only once the copy is
// confirmed. A batch whose commit outcome is unknown is never acked: it is
// requeued, and its redelivery meets the processed_event row.
//
// Batches form by themselves under load: a worker takes what has arrived,
// up to batch.size, and lingers for batch.wait only while busy (its last
// batch at least half full), so that at low load an event is committed at
// once. When a batch is all committed and the next delivery is already
// waiting, its ack is held for the next batch's multiple ack (at most a
// quarter of the worker's prefetch window held); before the worker blocks
// for more deliveries, a held ack is sent. Only committed tags are ever
// covered, and losing a held ack only redelivers committed events, which
// the dedup step skips.
//
// The broker itself (connections, publishing with confirms, topology,
// headers, the failure queue's tools) is internal/broker's. A pool's
// workers reconnect through a broker.Conn, open fresh channels each time
// and declare the topology again on each; deliveries of a dead channel are
// never acked on another.
//
// At start a pool moves what an older version left in its own delay queues
// (<queue>.retry.<delay>) and failure queue (<queue>.failed) into the shared
// delay queues and the failure store, and deletes the old delay queues once
// empty.
//
// Pause and resume cancel and restart consumption without dropping the work
// in hand; the pause state lives in the service database so it holds
// across restarts and across daemons.
package workers
