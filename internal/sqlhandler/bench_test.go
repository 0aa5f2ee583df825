package sqlhandler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/migrate"
	"github.com/platformd/platformd/internal/procstat"
	"github.com/platformd/platformd/internal/sqlhandler"
	"github.com/platformd/platformd/internal/testdb"
)

// shopSQL returns the stock reservation's SQL handler of
// examples/shop-sql/platformd.yaml, the benchmark's contender.
func shopSQL(b *testing.B) config.SQLHandlerConfig {
	b.Helper()
	cfg, err := config.Load(filepath.Join("..", "..", "examples", "shop-sql", "platformd.yaml"), nil)
	if err != nil {
		b.Fatal(err)
	}
	s, _ := cfg.Service("stock")
	for _, h := range s.SQLHandlers {
		if h.Name == shopReserveSQL {
			return h
		}
	}
	b.Fatalf("examples/shop-sql: no SQL handler %s", shopReserveSQL)
	return config.SQLHandlerConfig{}
}

// shopReserveSQL is the stock reservation's SQL handler in examples/shop-sql.
const shopReserveSQL = "stock.reserve_sql"

// BenchmarkStockReserve is the shop's stock effect, through the dedup step
// as the daemon runs it (one transaction per batch of 100 new events, the
// processed_event insert included), by the Go batch handler
// (internal/fixture/shop/stock.go: one INSERT over unnest'ed arrays), by the SQL
// handler of examples/shop-sql as the daemon runs it (its batch form: the
// INSERT ... SELECT once over the batch's unnest'ed events), and by the
// same SQL handler statement by statement (one INSERT per event, the
// batch's statements in one pipeline). It reports events/s, and the CPU
// per event of this process (the client: decoding, encoding) and of the
// PostgreSQL backend (one connection, so one backend).
func BenchmarkStockReserve(b *testing.B) {
	for _, lines := range []int{1, 3} {
		for _, kind := range []string{"go-batch", "sql", "sql-pipeline"} {
			b.Run(fmt.Sprintf("%s/lines=%d", kind, lines), func(b *testing.B) {
				benchReserve(b, kind, lines)
			})
		}
	}
}

func benchReserve(b *testing.B, kind string, lines int) {
	ctx := context.Background()
	reg := consumer.NewRegistry()
	if err := shop.Register(reg); err != nil {
		b.Fatal(err)
	}
	dsn := testdb.New(b, "bench_reserve")
	sets, err := migrate.Sets(reg, []string{shop.HandlerStockReserve})
	if err != nil {
		b.Fatal(err)
	}
	if err := migrate.Apply(ctx, dsn, sets, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		b.Fatal(err)
	}
	db, err := dedup.Connect(ctx, dsn, dedup.ConnectConfig{MaxConns: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	var h consumer.Handler
	name := shop.HandlerStockReserve
	switch kind {
	case "go-batch":
		r, _ := reg.Lookup(shop.HandlerStockReserve)
		h = r.Handler
	case "sql", "sql-pipeline":
		hc := shopSQL(b)
		name = hc.Name
		sh, err := sqlhandler.New(hc.Name, hc.Statements())
		if err != nil {
			b.Fatal(err)
		}
		if kind == "sql" { // prepared as the daemon does: its batch form on
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				b.Fatal(err)
			}
			err = sh.Prepare(ctx, conn.PgConn())
			_ = conn.Close(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if on, why := sh.BatchMode(); !on {
				b.Fatalf("no batch form: %s", why)
			}
		}
		h = sh
	}
	p := dedup.NewProcessor(db, dedup.ProcessorConfig{Routes: map[string][]dedup.Route{
		shop.EventOrderPlaced: {{Name: name, Handler: h}},
	}})
	pid := backendPID(b, db)

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
	// Warm up: statements prepared, caches filled.
	if _, err := p.Process(ctx, newBatch()); err != nil {
		b.Fatal(err)
	}
	batches := make([][]consumer.Event, b.N)
	for i := range batches {
		batches[i] = newBatch()
	}
	dbCPU0, selfCPU0 := procstat.Process(pid), procstat.Self()
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
	b.ReportMetric(float64(procstat.Self()-selfCPU0)/events, "client-cpu-ns/event")
	b.ReportMetric(float64(procstat.Process(pid)-dbCPU0)/events, "db-cpu-ns/event")
}

// backendPID returns the PID of the pool's one backend.
func backendPID(b *testing.B, db *pgxpool.Pool) int {
	b.Helper()
	var pid int
	if err := db.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		b.Fatal(err)
	}
	return pid
}
