// Package broker is platformd's side of RabbitMQ below the pools, the
// relay and the admin tools, which all use it (watermill-amqp keeps the
// same in one package):
//
//   - Conn: a connection that spans the nodes of a cluster (broker.urls),
//     starts at one chosen at random, moves to the next when it is lost,
//     and is bounded on a node that answers only heartbeats. amqp091-go
//     does not reconnect safely by itself (its opt-in recovery can ack a
//     stale tag on a new channel), so every reconnect is a fresh
//     connection and fresh channels, with backoff (startstop.Backoff).
//   - Publisher: publishing with confirms and mandatory routing, a
//     returned message an error (ErrReturned), a negative confirm another
//     (ErrNacked).
//   - Topology: a pool's queue, declared idempotently, and the retry delay
//     queues every pool of the vhost shares, one per delay (DelayQueue,
//     DeclareDelays: a queue of another type is used as it is, never a
//     406); OldRetryQueue and FailedQueue name the per-pool queues an
//     older version declared, which a pool drains at start; QueueDepths
//     reads depths with passive declares.
//   - The headers of the topology contract (Header*, Reason*) and the
//     retry copy built from a delivery (RetryCopy).
//
// brokertest stands in for cluster nodes in tests.
package broker
