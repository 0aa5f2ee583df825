// Package replay replays a producer's archived events
// (platform.outbox_archive, DESIGN.md "Archive and replay").
//
// Select reads the events a selection matches from the producer's archive
// once; DryRun counts, per target pool, what a copy would do there, with one
// set query per pool against the consuming service's processed_event (read
// only). A real replay is a row of the producer's platform.replay; a Runner
// per producer, active on one daemon at a time (an advisory lock held by a
// dedicated session, as the outbox relay's), publishes its events in
// event_id order at its rate, with publisher confirms, and records its
// cursor after each chunk's confirms.
//
// The guarantee: a replay never publishes one archived event twice while
// its runner lives, whatever is cancelled or fails (a chunk's progress is
// recorded under a context that is not cancelled, and ids confirmed past a
// failed publish are remembered and skipped). Only the runner's death
// (SIGKILL, its database session lost) in the window between a chunk's
// last confirm and the commit of its progress (one UPDATE, a millisecond
// or two) can publish that chunk's events again, at most ChunkMax of them,
// on resume; the consumers' dedup absorbs such copies.
package replay
