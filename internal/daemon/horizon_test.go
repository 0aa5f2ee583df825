package daemon

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/faultproxy"
	"github.com/platformd/platformd/internal/migrate"
	"github.com/platformd/platformd/internal/testdb"
)

// cutOnQuery is a pgx query tracer that black-holes the proxy when a
// query containing match starts (a database that stops answering without
// closing anything), and reports it on started.
type cutOnQuery struct {
	armed   atomic.Bool
	match   string
	proxy   *faultproxy.Proxy
	started chan struct{}
	once    sync.Once
}

func (c *cutOnQuery) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if c.armed.Load() && strings.Contains(data.SQL, c.match) {
		c.proxy.Blackhole()
		c.once.Do(func() { close(c.started) })
	}
	return ctx
}

func (c *cutOnQuery) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A refresh of the horizon whose database stops answering mid-refresh
// (after the horizon was read, while the layout is) leaves get answering
// at once with the horizon it had; the refresh ends with its context.
func TestHorizonCacheGetNeverWaitsForADeadDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.New(t, t.Name())
	sets, err := migrate.Sets(consumer.NewRegistry(), nil)
	require.NoError(t, err)
	require.NoError(t, migrate.Apply(ctx, dsn, sets, slog.New(slog.DiscardHandler)))

	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	proxy, err := faultproxy.New(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))), faultproxy.Options{})
	require.NoError(t, err)
	host, port, err := net.SplitHostPort(proxy.Addr())
	require.NoError(t, err)
	cfg.ConnConfig.Host = host
	p, err := strconv.ParseUint(port, 10, 16)
	require.NoError(t, err)
	cfg.ConnConfig.Port = uint16(p)
	tracer := &cutOnQuery{match: "to_regclass('processed_event')", proxy: proxy, started: make(chan struct{})}
	cfg.ConnConfig.Tracer = tracer
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		proxy.Close() // first: a pool closing through a silent proxy waits for each connection's timeout
		db.Close()
	})

	c := newHorizonCache(db, "stock", 48*time.Hour, time.Hour, slog.New(slog.DiscardHandler))
	c.refresh(ctx)
	require.Equal(t, 48*time.Hour, c.get())

	tracer.armed.Store(true)
	refreshCtx, cancel := context.WithCancel(ctx)
	refreshed := make(chan struct{})
	go func() {
		defer close(refreshed)
		c.refresh(refreshCtx)
	}()
	<-tracer.started // the database went silent mid-refresh

	got := make(chan time.Duration, 1)
	go func() { got <- c.get() }()
	select {
	case h := <-got:
		require.Equal(t, 48*time.Hour, h)
	case <-time.After(2 * time.Second):
		cancel()
		<-refreshed
		t.Fatal("get waited for a refresh blocked on a silent database")
	}

	// A second refresh waits for the first no longer than its context.
	second, cancelSecond := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelSecond()
	c.refresh(second)
	require.ErrorIs(t, second.Err(), context.DeadlineExceeded)

	cancel()
	select {
	case <-refreshed:
	case <-time.After(10 * time.Second):
		t.Fatal("a refresh outlived its context")
	}
	require.Equal(t, 48*time.Hour, c.get())
}
