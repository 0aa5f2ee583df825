// Package remote runs remote handlers (`services[].remote_handlers`,
// docs/remote-handlers.md): a service's logic in a process of its own,
// in any language, called over HTTP with the batch's new events after the
// dedup insert, answering the effects to apply as data. platformd applies
// them, and writes the messages it asks to publish to the outbox, in the
// batch's transaction with the processed_event rows: a duplicate never
// reaches the handler, and its effects commit exactly once.
//
// A Handler is a consumer.BatchHandler. HandleBatch makes one call for the
// batch's events (those it was not asked about in this batch already) and
// runs every event's effects as one pipeline. The answers are kept in the
// batch's scope (package batchscope): when the dedup step replays the
// batch event by event (an event's error, a statement PostgreSQL refused,
// another handler failing), Handle applies the kept answer instead of
// asking again, so the handler answers once per event per attempt.
//
// Failures, as the contract says:
//   - a call not answered (refused, TLS, timeout) or answered 429, 502,
//     503 or 504 is an *UnavailableError: the dedup step treats it as its
//     database away (nothing applied, no attempt counted, the batch
//     requeued, the pool CONNECTING with the error until the handler
//     answers);
//   - any other status, a body not of the contract's shape, or results not
//     one-to-one with the call's events is a *BadAnswerError: the events
//     are retried, attempts counted, and the replay asks one event per
//     call, so a poison event fails alone;
//   - a result's "error" fails its event (retried, or permanent with
//     "permanent": true); an unknown statement, a missing or extra arg,
//     or a statement failing with SQLSTATE class 22 or 23 fails it as
//     permanent.
//
// Args bind as text ($n::text; the statement casts): a string as its
// value, a number as its literal exactly as written (12.50 stays 12.50),
// true/false, an object or array as its JSON text, null as NULL.
package remote
