package remote_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/migrate"
	"github.com/platformd/platformd/internal/procstat"
	"github.com/platformd/platformd/internal/remote"
	"github.com/platformd/platformd/internal/sqlhandler"
	"github.com/platformd/platformd/internal/testdb"
)

// benchHandlerEnv, set, makes the test binary the benchmark's remote
// handler (a process of its own, so that its CPU is measured apart),
// listening on its value.
const benchHandlerEnv = "PLATFORMD_BENCH_REMOTE_HANDLER"

// reserveRemote is the shop's stock effect as a remote handler's one
// statement per event.
const reserveRemote = shop.RemoteReserveStatement

// serveBenchHandler serves the shop's remote reservation handler, as a
// small Go service would.
func serveBenchHandler(addr string) error {
	srv := &http.Server{Addr: addr, Handler: shop.RemoteReserveHandler(), ReadHeaderTimeout: 5 * time.Second}
	return srv.ListenAndServe()
}

// BenchmarkStockReserveRemote is the shop's stock effect through the
// dedup step as the daemon runs it (one transaction per batch of 100 new
// events): by a remote handler served by a Go HTTP server in a process of
// its own (one call per batch, one statement per event in one pipeline),
// against the SQL handler of examples/shop-sql (its batch form), same
// events. It reports events/s and the CPU per event of this process (the
// consumer: platformd's share), of the handler process, and of the
// PostgreSQL backend.
func BenchmarkStockReserveRemote(b *testing.B) {
	for _, lines := range []int{1, 3} {
		for _, kind := range []string{"sql", "remote"} {
			b.Run(fmt.Sprintf("%s/lines=%d", kind, lines), func(b *testing.B) { benchReserve(b, kind, lines) })
		}
	}
}

func benchReserve(b *testing.B, kind string, lines int) {
	ctx := context.Background()
	reg := consumer.NewRegistry()
	if err := shop.Register(reg); err != nil {
		b.Fatal(err)
	}
	dsn := testdb.New(b, "bench_remote")
	sets, err := migrate.Sets(reg, []string{shop.HandlerStockReserve})
	if err != nil {
		b.Fatal(err)
	}
	if err := migrate.Apply(ctx, dsn, sets, slog.New(slog.DiscardHandler)); err != nil {
		b.Fatal(err)
	}
	db, err := dedup.Connect(ctx, dsn, dedup.ConnectConfig{MaxConns: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	var h consumer.Handler
	handlerPID := 0
	switch kind {
	case "sql":
		cfg, err := config.Load(filepath.Join("..", "..", "examples", "shop-sql", "platformd.yaml"), nil)
		if err != nil {
			b.Fatal(err)
		}
		s, _ := cfg.Service("stock")
		sh, err := sqlhandler.New(s.SQLHandlers[0].Name, s.SQLHandlers[0].Statements())
		if err != nil {
			b.Fatal(err)
		}
		if err := sh.Prepare(ctx, conn.PgConn()); err != nil {
			b.Fatal(err)
		}
		h = sh
	case "remote":
		addr, pid := startBenchHandler(b)
		handlerPID = pid
		rh, err := remote.New(remote.Config{Service: "stock", Name: "stock.reserve_remote", URL: "http://" + addr + "/handle",
			Statements: map[string]string{"reserve": reserveRemote}, MaxConns: 1})
		if err != nil {
			b.Fatal(err)
		}
		defer rh.Close()
		if err := rh.Prepare(ctx, conn.PgConn()); err != nil {
			b.Fatal(err)
		}
		h = rh
	}
	p := dedup.NewProcessor(db, dedup.ProcessorConfig{Routes: map[string][]dedup.Route{shop.EventOrderPlaced: {{Name: "h", Handler: h}}}})
	var backend int
	if err := db.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		b.Fatal(err)
	}
	const batchSize = 100
	newBatch := func() []consumer.Event {
		evs := make([]consumer.Event, batchSize)
		for i := range evs {
			o := shop.OrderPlaced{OrderID: uuid.New(), CustomerID: uuid.New()}
			for range lines {
				o.Lines = append(o.Lines, shop.OrderLine{ProductID: uuid.New(), Quantity: "2.000"})
			}
			raw, _ := json.Marshal(o)
			evs[i] = consumer.Event{ID: uuid.Must(uuid.NewV7()), Name: shop.EventOrderPlaced, OccurredAt: time.Now(), Payload: raw}
		}
		return evs
	}
	if _, err := p.Process(ctx, newBatch()); err != nil { // warm up
		b.Fatal(err)
	}
	batches := make([][]consumer.Event, b.N)
	for i := range batches {
		batches[i] = newBatch()
	}
	db0, self0, h0 := procstat.Process(backend), procstat.Self(), time.Duration(0)
	if handlerPID > 0 {
		h0 = procstat.Process(handlerPID)
	}
	b.ResetTimer()
	for _, evs := range batches {
		rs, err := p.Process(ctx, evs)
		if err != nil {
			b.Fatal(err)
		}
		if rs[0].Outcome != dedup.OutcomeProcessed {
			b.Fatalf("%v: %v", rs[0].Outcome, rs[0].Err)
		}
	}
	b.StopTimer()
	events := float64(b.N * batchSize)
	b.ReportMetric(events/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(procstat.Self()-self0)/events, "consumer-cpu-ns/event")
	b.ReportMetric(float64(procstat.Process(backend)-db0)/events, "db-cpu-ns/event")
	if handlerPID > 0 {
		b.ReportMetric(float64(procstat.Process(handlerPID)-h0)/events, "handler-cpu-ns/event")
	}
}

// startBenchHandler runs this test binary as the remote handler and
// returns its address and PID.
func startBenchHandler(b *testing.B) (string, int) {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), benchHandlerEnv+"="+addr)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_ = c.Close()
			return addr, cmd.Process.Pid
		}
		if time.Now().After(deadline) {
			b.Fatalf("the bench handler did not start: %v", err)
		}
		time.Sleep(10 * time.Millisecond) //nolint:forbidigo // a bounded poll of a subprocess's port
	}
}

// runBenchHandler serves as the bench handler when the environment asks
// for it (called from TestMain) and reports whether it did.
func runBenchHandler() bool {
	addr := os.Getenv(benchHandlerEnv)
	if addr == "" {
		return false
	}
	if err := serveBenchHandler(addr); err != nil && !errors.Is(err, http.ErrServerClosed) {
		_, _ = io.WriteString(os.Stderr, err.Error()+"\n")
	}
	return true
}
