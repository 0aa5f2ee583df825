// Package chaos is platformd's black-box chaos suite (`make chaos`). It has
// no code of its own outside its tests: they build the real daemon with
// the tests' shop handlers (./internal/fixture/shop/shopd), run it as a subprocess
// (two instances sharing the service databases for part of the run)
// against the local PostgreSQL and RabbitMQ, and, while a producer publishes shop events with duplicates
// from the seed's three causes (relay republish, broker redelivery, replay),
// inject faults: SIGKILL, forced broker connection closes, terminated
// PostgreSQL backends, a PostgreSQL restart (CHAOS_PG_RESTART=1), a network
// black hole between a daemon and its databases (an in-process TCP proxy),
// a PgBouncer of the test's own in front of a `database_mode: pooler`
// service, shut down and crashed mid-run,
// pause/resume and purges through the admin API, and bad input interleaved
// with the good. A checker then reads the databases and their failure
// stores (platform.failed_event) and asserts that every good event was
// applied exactly once and every bad one stored once with its reason.
//
// Each test has its own RabbitMQ vhost, databases, exchange, queues and
// ports, so forced closes and terminated sessions hit only that test: the
// tests run in parallel (make chaos: -parallel 6), but for the three whose
// fault is a whole server: TestChaosPostgresRestart and
// TestChaosDelayedRetriesSurviveABrokerRestart run alone before the others
// (Go runs a package's sequential tests first), and
// TestChaosBrokerCluster alone in a step of its own (make chaos-cluster).
// Environment: TEST_DATABASE_URL and TEST_AMQP_URL as for the unit tests;
// CHAOS_SEED fixes the random seed (logged by every test);
// CHAOS_PG_RESTART=1 enables the test that restarts the PostgreSQL cluster
// (it affects every other user of the server); CHAOS_BROKER_RESTART=1 the
// one that restarts the main RabbitMQ node's application (every user of
// the node); CHAOS_DAEMON_RACE=1 builds the daemon with -race. -short shrinks volumes.
package chaos
