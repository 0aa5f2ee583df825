// Package try runs one event through one handler of a service against the
// service's real database, inside a transaction that is always rolled
// back, and reports what the handler would have done: `platformd try`.
//
// It goes through the daemon's own dedup step (package dedup, over
// savepoints of the rolled-back transaction): the insert into
// processed_event, the handler, the savepoint replay after a failure, the
// classification of the handler's error as permanent or retryable, the
// resolution of a stored failure. The transaction handed to the handler
// records every statement it runs with its command tag (rows affected),
// and the outbox rows the transaction holds at the end are read back
// before the rollback. A remote handler is really called over HTTP; its
// request and raw answer are kept, with every problem found in the answer.
// Nothing needs a broker.
//
// Only database effects are rolled back: a Go handler that calls out
// (email, HTTP) does so for real, as a remote handler's process does
// whatever it does when asked.
package try
