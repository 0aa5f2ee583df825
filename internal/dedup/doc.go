// Package dedup is the transactional step of platformd: it records each
// event id in the service's processed_event table with
// INSERT ... ON CONFLICT DO NOTHING, in the same READ COMMITTED transaction
// as the handlers' effects, and calls handlers only for the ids it inserted.
// A duplicate delivery therefore has no effect, and a failed event leaves no
// row behind, so its retry applies it.
//
// A batch runs in one transaction with one multi-row insert and one commit
// (one WAL flush for the whole batch). When one event's handlers fail, the
// transaction is rolled back and the batch is replayed event by event inside
// savepoints, so the other events commit and only the failing one goes back
// to its caller as failed, its processed_event row gone with its effects.
//
// The package also looks ids up and purges rows older than a cutoff computed
// by the database clock, in short chunks.
package dedup
