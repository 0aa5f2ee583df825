package broker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/testenv"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"), // amqp091 heartbeat reader of a closing conn
	)
}

// localConn returns a Conn named name to the test broker, closed when the
// test ends, and a context bounding the test's broker calls (30 s).
func localConn(t *testing.T, name string) (*Conn, context.Context) {
	t.Helper()
	conn := NewConn([]string{testenv.AMQPURL()}, name, nil, slog.New(slog.DiscardHandler))
	t.Cleanup(conn.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return conn, ctx
}
