// Package failure is the failure store: a message that will not apply is a
// row of the service database's platform.failed_event, not a message left
// in a queue. The workers write a batch's failures in one transaction
// before they ack its deliveries (Store.Write); the dedup step resolves a
// retried copy's row in the very transaction that applies it, or finds it
// a duplicate (Resolve); ordered pools look up the open rows of a batch's
// keys once per batch (Store.Open) and park a key's later events behind
// its failed head; the workbench (groups, listings, edits, discards,
// server-side retries) reads and changes the rows for operators.
//
// A failure's id is a UUID v7 minted when its row is first written, so
// that id order is arrival order: parked events are released in it.
//
// Everything here is safe for concurrent use: the state lives in
// PostgreSQL, and every change is one statement or one transaction.
package failure
