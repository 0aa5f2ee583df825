// Package outbox is platformd's outbox relay: for
// one service, it publishes the rows of the service's platform.outbox table
// to the broker after their writers committed, and deletes each row once
// the broker confirmed its message.
//
// Guarantees and how they are kept:
//   - At least once. A row is deleted only after the broker confirmed its
//     message (publisher confirms) and did not return it (mandatory), or
//     confirmed its copy to the unroutable queue (or, with drop, returned
//     it: nobody was subscribed). A crash between the confirm and the delete publishes the row again;
//     consumers deduplicate by event_id. Rows of a rolled-back transaction
//     never exist, so they never leave.
//   - Nothing skipped. Every pass selects what is visible now, in event_id
//     order, from the start of the table: there is no high-water mark, so a
//     row committed late with a lower id than rows already sent still goes
//     out (watermill-sql lost such rows, watermill#311).
//   - Exactly the row. The payload is read as PostgreSQL renders the jsonb
//     (as text: numbers keep their digits), occurred_at is written in UTC
//     with its microseconds, the row's headers become AMQP headers.
//   - Unroutable events leave. A row whose message the broker returns (no
//     queue bound for its routing key: the relay publishes with mandatory)
//     is, by Config.Unroutable, sent on unchanged to the exchange's
//     unroutable exchange and queue (package broker, DeclareUnroutable),
//     where the broker keeps it until an operator replays it, and deleted
//     after that copy's confirm (hold, the default); or deleted (drop).
//     Counted either way, and logged once per event name per WarnEvery,
//     not once per row.
//   - Held, never lost, never spinning. A row that cannot be a valid
//     envelope, or whose copy the unroutable queue returned too, stays in
//     the table, is counted and logged (once per event name per WarnEvery),
//     and is retried with exponential backoff while the rows behind it go
//     on.
//   - One relay per service. The relay publishes only while it holds the
//     lease LeaseName (package lease), checked before each pass; standbys
//     try to take it every LockRetry, so a dead holder is replaced within
//     the lease's TTL.
//   - Woken at commit. A statement-level trigger NOTIFYs platform_outbox on
//     every insert, whoever the writer is; a poll every Poll covers lost
//     notifications.
//
// A Relay follows platformd's one lifecycle: Start(ctx) runs it in the
// background, Stop blocks until it has stopped, may be called twice and
// before Start.
package outbox
