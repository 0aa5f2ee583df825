// Package consumer is what handler authors import to plug their code into
// platformd: the Event a handler receives, the Handler contract, the Registry
// of named handlers, and Permanent to mark an error that no retry can fix.
//
// A handler runs inside the service's PostgreSQL transaction, after
// platformd has recorded the event id in processed_event. Everything it does
// through the given pgx.Tx commits together with that row, or not at all, so
// a duplicate delivery of the same event never reaches the handler again.
//
// Only database effects are protected. A handler that calls out (sends an
// email, calls an HTTP API, publishes a message) is not undone by a rollback
// and may run again on retry: such effects need their own idempotency key
// (the event id is a good one), or must be moved to a message sent after the
// commit (an outbox row written in the same transaction).
package consumer
