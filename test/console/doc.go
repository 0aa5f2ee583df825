// Package console holds the end-to-end tests of the web console: the real
// daemon the platformd binary runs, started in the test process by
// daemontest with the shop's handlers, against the local PostgreSQL and
// RabbitMQ (scratch databases, an exchange and queues of their own, free
// ports), driven over HTTP and in headless Chromium with chromedp.
//
// The browser tests need Debian's chromium (scripts/services.sh installs
// it). Without it they skip, unless the environment variable CI is set:
// in CI a missing browser fails them. With CONSOLE_SHOTS=DIR,
// TestConsoleShots writes screenshots of the main pages to DIR (make
// console-shots).
package console
