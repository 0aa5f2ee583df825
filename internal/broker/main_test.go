package broker

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"), // amqp091 heartbeat reader of a closing conn
	)
}

// amqpURL is the broker the tests use (TEST_AMQP_URL, else the local one).
func amqpURL() string {
	if u := os.Getenv("TEST_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// localConn returns a Conn named name to the test broker, closed when the
// test ends, and a context bounding the test's broker calls (30 s).
func localConn(t *testing.T, name string) (*Conn, context.Context) {
	t.Helper()
	conn := NewConn([]string{amqpURL()}, name, nil, slog.New(slog.DiscardHandler))
	t.Cleanup(conn.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return conn, ctx
}
