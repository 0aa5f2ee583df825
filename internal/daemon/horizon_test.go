package daemon

import (
	"context"
	"io"
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
	"github.com/platformd/platformd/internal/migrate"
	"github.com/platformd/platformd/internal/testdb"
)

// blackHole is a TCP proxy to a PostgreSQL server that forwards both ways
// until cut, then swallows every byte: a database that stops answering
// without closing anything.
type blackHole struct {
	ln      net.Listener
	target  string
	cutOnce sync.Once
	cut     chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   []net.Conn
}

func startBlackHole(t *testing.T, target string) *blackHole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &blackHole{ln: ln, target: target, cut: make(chan struct{})}
	p.wg.Go(p.accept)
	t.Cleanup(p.Close)
	return p
}

// Close closes the proxy and every connection through it.
func (p *blackHole) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *blackHole) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(up, c) })
		p.wg.Go(func() { p.pipe(c, up) })
	}
}

// pipe copies from src to dst until src closes, dropping what it reads
// once the proxy is cut.
func (p *blackHole) pipe(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-p.cut:
		default:
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *blackHole) Cut() { p.cutOnce.Do(func() { close(p.cut) }) }

// cutOnQuery is a pgx query tracer that cuts the proxy when a query
// containing match starts, and reports it on started.
type cutOnQuery struct {
	armed   atomic.Bool
	match   string
	proxy   *blackHole
	started chan struct{}
	once    sync.Once
}

func (c *cutOnQuery) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if c.armed.Load() && strings.Contains(data.SQL, c.match) {
		c.proxy.Cut()
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
	proxy := startBlackHole(t, net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	host, port, err := net.SplitHostPort(proxy.ln.Addr().String())
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
