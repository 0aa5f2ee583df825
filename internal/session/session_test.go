package session

import (
	"context"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/query"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/testdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	db, err := dedup.Connect(context.Background(), testdb.New(t, "session"), dedup.ConnectConfig{MaxConns: 3, MaxConnIdleTime: time.Second})
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return db
}

func backendPID(ctx context.Context, s *Session) (int32, error) {
	var pid int32
	err := s.Do(ctx, func(ctx context.Context, q query.Querier) error {
		return q.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid)
	})
	return pid, err
}

// TestSessionOneConnection: notifications of every channel and Do calls
// share one connection, which is not the pool's; the pool, unused, holds
// none; a lost session is taken again and Do falls back to the pool
// meanwhile.
func TestSessionOneConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	s := New(Config{DB: db, Poll: time.Hour})
	got := make(chan string, 10)
	for _, ch := range []string{"a", "b"} {
		s.Subscribe(ch, func(_ context.Context, _ query.Querier, payload string) {
			if payload != "" {
				got <- ch + ":" + payload
			}
		})
	}
	s.TestSignals().Listening.Init(t)
	s.TestSignals().Lost.Init(t)
	require.NoError(t, s.Start(ctx))
	t.Cleanup(s.Stop)
	s.TestSignals().Listening.WaitOrTimeout()
	require.True(t, s.Listening())

	pid, err := backendPID(ctx, s)
	require.NoError(t, err)
	again, err := backendPID(ctx, s)
	require.NoError(t, err)
	require.Equal(t, pid, again, "Do runs on the session's connection")
	require.Zero(t, db.Stat().TotalConns(), "the session's connection left the pool")

	_, err = db.Exec(ctx, `SELECT pg_notify('a', 'x'), pg_notify('b', 'y')`)
	require.NoError(t, err)
	require.Equal(t, "a:x", <-got)
	require.Equal(t, "b:y", <-got)

	// Killed: taken again, on another backend.
	_, err = db.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid)
	require.NoError(t, err)
	s.TestSignals().Lost.WaitOrTimeout()
	s.TestSignals().Listening.WaitOrTimeout()
	again, err = backendPID(ctx, s)
	require.NoError(t, err)
	require.NotEqual(t, pid, again, "held again, on another backend")
	_, err = db.Exec(ctx, `SELECT pg_notify('a', 'z')`)
	require.NoError(t, err)
	require.Equal(t, "a:z", <-got)
}

// TestSessionNoListen: without LISTEN, Do runs on the pool and subscribers
// are polled.
func TestSessionNoListen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	s := New(Config{DB: db, NoListen: true, Poll: 20 * time.Millisecond})
	polled := make(chan struct{}, 100)
	s.Subscribe("a", func(context.Context, query.Querier, string) {
		select {
		case polled <- struct{}{}:
		default:
		}
	})
	require.NoError(t, s.Start(ctx))
	t.Cleanup(s.Stop)
	for range 3 {
		<-polled
	}
	require.False(t, s.Listening())
	_, err := backendPID(ctx, s)
	require.NoError(t, err)
}
