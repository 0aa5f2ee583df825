// Package soak is platformd's long-run proof (`make soak`, issue 43): an
// hour (SOAK_DURATION) of steady load through every kind of handler (Go,
// SQL, a remote handler in Python) and the outbox chain, with duplicates
// of the three kinds (relay republish, broker redelivery, replay), on a
// three-node RabbitMQ cluster and a PostgreSQL server of its own, while a
// fault drawn from a catalogue of seventeen kinds strikes every 20-40 s.
//
// At the end a checker reads the service databases, the producer's and
// billing's outbox archives and a tap queue bound to every routing key,
// and asserts: every event applied exactly once in every service it
// reaches, nothing lost (applied, or a row of platform.failed_event with
// its reason), per-key order where partition_key keeps it, no purge past
// the horizon, every pool drained and every failure explained by a fault.
// Every 10 s it samples the daemons' RSS, goroutines and open fds, the
// database connections, the broker's connections and channels, and the
// broker's and PostgreSQL's private memory; a curve whose slope over the
// last two thirds of the run grows past its tolerance is a leak. It writes
// the curves and the faults on one time axis as soak.svg beside the run's
// log, and prints last:
//
//	soak: <duration>, faults: N (kinds: K), events: N, applied twice: 0, lost: 0, leaks: none
//
// It has no code outside its tests and skips unless SOAK=1: scripts/soak.sh
// starts the private PostgreSQL and RabbitMQ cluster it needs (it restarts
// and kills them) and runs it. SOAK_SEED replays a run's choices;
// SOAK_BREAK=nodedup runs a daemon built without the dedup insert, which
// the checker must catch.
package soak
