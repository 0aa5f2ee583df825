// Package testenv names the services every test runs against: the
// PostgreSQL server (TEST_DATABASE_URL) and the RabbitMQ broker
// (TEST_AMQP_URL), with the local defaults `make test` starts. It is the
// one place that reads those variables; test helpers (testdb, brokertest,
// the suites' harnesses) ask it. Safe for concurrent use.
package testenv

import "os"

// Defaults when the variables are unset: the services scripts/services.sh
// installs and starts.
const (
	DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres"
	DefaultAMQPURL     = "amqp://guest:guest@127.0.0.1:5672/"
)

// DatabaseURL is the maintenance database of the PostgreSQL server tests
// use: TEST_DATABASE_URL, else DefaultDatabaseURL.
func DatabaseURL() string { return getenv("TEST_DATABASE_URL", DefaultDatabaseURL) }

// AMQPURL is the RabbitMQ broker tests use: TEST_AMQP_URL, else
// DefaultAMQPURL.
func AMQPURL() string { return getenv("TEST_AMQP_URL", DefaultAMQPURL) }

func getenv(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
