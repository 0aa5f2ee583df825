package shop_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/examples/shop"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/migrate"
	"github.com/platformd/platformd/internal/sqlhandler"
	"github.com/platformd/platformd/internal/testdb"
	"github.com/platformd/platformd/migrations"
)

// side is one way of running a shop service: its database and processor.
type side struct {
	db  *pgxpool.Pool
	p   *dedup.Processor
	sql []*sqlhandler.Handler // the SQL side's handlers
}

func connect(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	db, err := dedup.Connect(context.Background(), dsn, dedup.ConnectConfig{})
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return db
}

// goSide runs the shop's Go handlers, migrated as platformd migrates them.
func goSide(t *testing.T, reg *consumer.Registry, handlers []string) side {
	t.Helper()
	dsn := testdb.New(t, "go_"+handlers[0])
	sets, err := migrate.Sets(reg, handlers)
	require.NoError(t, err)
	require.NoError(t, migrate.Apply(context.Background(), dsn, sets, slog.New(slog.NewTextHandler(io.Discard, nil))))
	db := connect(t, dsn)
	routes, err := dedup.RoutesFor(reg, handlers)
	require.NoError(t, err)
	return side{db: db, p: dedup.NewProcessor(db, dedup.ProcessorConfig{Routes: routes})}
}

// sqlSide runs a service of examples/shop-sql/platformd.yaml: its
// migrations folder and its SQL handlers, in their order, prepared as the
// daemon prepares them (which turns a batch form on where it may) unless
// pipeline is set, which keeps them to their statements event by event.
func sqlSide(t *testing.T, s config.ServiceConfig, pipeline bool) side {
	t.Helper()
	ctx := context.Background()
	dsn := testdb.New(t, "sql_"+s.Name)
	require.NotEmpty(t, s.Migrations)
	require.NoError(t, migrate.Apply(ctx, dsn, []migrate.Set{
		{Name: migrate.PlatformSetName, FS: migrations.Platform()}, migrate.ServiceSet(s.Name, os.DirFS(s.Migrations)),
	}, slog.New(slog.NewTextHandler(io.Discard, nil))))
	db := connect(t, dsn)
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	sd := side{db: db}
	routes := map[string][]dedup.Route{}
	for _, hc := range s.SQLHandlers {
		h, err := sqlhandler.New(hc.Name, hc.Statements())
		require.NoError(t, err)
		if pipeline {
			check, err := sqlhandler.New(hc.Name, hc.Statements())
			require.NoError(t, err)
			require.NoError(t, check.Prepare(ctx, conn.PgConn()))
		} else {
			require.NoError(t, h.Prepare(ctx, conn.PgConn()))
		}
		for _, ev := range hc.Events {
			routes[ev] = append(routes[ev], dedup.Route{Name: hc.Name, Handler: h})
		}
		sd.sql = append(sd.sql, h)
	}
	sd.p = dedup.NewProcessor(db, dedup.ProcessorConfig{Routes: routes})
	return sd
}

// rows returns the text of every row of q, sorted by q.
func rows(t *testing.T, db *pgxpool.Pool, q string) []string {
	t.Helper()
	rs, err := db.Query(context.Background(), q)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (string, error) {
		vals, err := r.Values()
		return fmt.Sprint(vals...), err
	})
	require.NoError(t, err)
	return out
}

// The same workload, duplicated and shuffled across batches of random
// sizes, with payloads both kinds refuse, through the shop's Go handlers
// and through the SQL handlers of examples/shop-sql, these both with their
// batch form where they have one and statement by statement: identical
// outcomes per delivery, and identical reservation, outbox, order_status,
// parcel and processed_event tables.
func TestGoAndSQLHandlersLeaveIdenticalTables(t *testing.T) {
	t.Parallel()
	reg := consumer.NewRegistry()
	require.NoError(t, shop.Register(reg))
	cfg, err := config.Load(filepath.Join("..", "shop-sql", "platformd.yaml"), goCatalog{reg})
	require.NoError(t, err)
	stockCfg, ok := cfg.Service("stock")
	require.True(t, ok)
	shipCfg, ok := cfg.Service("shipping")
	require.True(t, ok)

	r := rand.New(rand.NewPCG(42, 7))
	var stockEvs, shipEvs []consumer.Event
	statuses := []string{"paid", "packed", "shipped", "delivered"}
	for range 300 {
		o := shop.OrderPlaced{OrderID: uuid.New(), CustomerID: uuid.New()}
		for range 1 + r.IntN(3) {
			o.Lines = append(o.Lines, shop.OrderLine{ProductID: uuid.New(), Quantity: fmt.Sprintf("%d.%03d", 1+r.IntN(9), r.IntN(1000))})
		}
		stockEvs = append(stockEvs, event(t, shop.EventOrderPlaced, o))
		shipEvs = append(shipEvs, event(t, shop.EventStockReserved, shop.StockReserved(o)))
		for v := range 1 + r.IntN(len(statuses)) {
			shipEvs = append(shipEvs, event(t, shop.EventOrderStatusChanged,
				shop.OrderStatusChanged{OrderID: o.OrderID, Status: statuses[v], Version: int32(v + 1)}))
		}
	}
	// Payloads both refuse, permanently: a quantity that is no number, lines
	// that are no array, a missing order_id; a version that is no number.
	for _, raw := range []string{
		`{"order_id": "` + uuid.NewString() + `", "customer_id": "` + uuid.NewString() + `", "lines": [{"product_id": "` + uuid.NewString() + `", "quantity": "abc"}]}`,
		`{"order_id": "` + uuid.NewString() + `", "customer_id": "` + uuid.NewString() + `", "lines": {"product_id": "` + uuid.NewString() + `", "quantity": "1"}}`,
		`{"customer_id": "` + uuid.NewString() + `", "lines": [{"product_id": "` + uuid.NewString() + `", "quantity": "1"}]}`,
	} {
		stockEvs = append(stockEvs, consumer.Event{ID: uuid.Must(uuid.NewV7()), Name: shop.EventOrderPlaced, OccurredAt: time.Now(), Payload: json.RawMessage(raw)})
	}
	shipEvs = append(shipEvs, consumer.Event{ID: uuid.Must(uuid.NewV7()), Name: shop.EventOrderStatusChanged, OccurredAt: time.Now(),
		Payload: json.RawMessage(`{"order_id": "` + uuid.NewString() + `", "status": "paid", "version": "x"}`)})

	for _, tc := range []struct {
		name         string
		handlers     []string
		svc          config.ServiceConfig
		evs          []consumer.Event
		effects      []string
		wantFailures int
		batchForm    []bool // per SQL handler: it has a batch form
	}{
		{"stock", []string{shop.HandlerStockReserve, shop.HandlerStockAnnounce}, stockCfg, stockEvs, []string{
			`SELECT order_id, product_id, quantity::text, substr(id::text, 15, 1) FROM reservation ORDER BY 1, 2, 3`,
			`SELECT event_name, payload, substr(event_id::text, 15, 1) FROM platform.outbox ORDER BY payload->>'order_id'`,
		}, 3, []bool{true, false}},
		{"shipping", []string{shop.HandlerShippingTrack, shop.HandlerShippingParcel}, shipCfg, shipEvs, []string{
			`SELECT order_id, status, version FROM order_status ORDER BY 1`,
			`SELECT order_id, customer_id, items, substr(id::text, 15, 1) FROM parcel ORDER BY 1`,
		}, 1, []bool{false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(uint64(len(tc.evs)), 1))
			goS := goSide(t, reg, tc.handlers)
			sqlSides := []side{sqlSide(t, tc.svc, false), sqlSide(t, tc.svc, true)}
			for k, h := range sqlSides[0].sql {
				on, why := h.BatchMode()
				require.Equal(t, tc.batchForm[k], on, "%s: %s", h.Name(), why)
			}
			// Every event one to three times, shuffled: duplicates in one
			// batch and across batches, versions out of order.
			var deliveries []consumer.Event
			for _, ev := range tc.evs {
				for range 1 + r.IntN(3) {
					deliveries = append(deliveries, ev)
				}
			}
			r.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
			failures := 0
			for len(deliveries) > 0 {
				batch := deliveries[:min(len(deliveries), 1+r.IntN(100))]
				deliveries = deliveries[len(batch):]
				goRs, err := goS.p.Process(context.Background(), batch)
				require.NoError(t, err)
				for _, sqlS := range sqlSides {
					sqlRs, err := sqlS.p.Process(context.Background(), batch)
					require.NoError(t, err)
					for i := range batch {
						require.Equal(t, goRs[i].Outcome, sqlRs[i].Outcome, "delivery of %s: go %v, sql %v", batch[i].ID, goRs[i].Err, sqlRs[i].Err)
						require.Equal(t, goRs[i].Permanent, sqlRs[i].Permanent, "go %v, sql %v", goRs[i].Err, sqlRs[i].Err)
						if sqlRs[i].Outcome == dedup.OutcomeFailed {
							failures++
						}
					}
				}
			}
			require.GreaterOrEqual(t, failures, 2*tc.wantFailures, "every copy of a bad payload fails")
			for _, q := range tc.effects {
				goRows := rows(t, goS.db, q)
				require.NotEmpty(t, goRows, q)
				for _, sqlS := range sqlSides {
					require.Equal(t, goRows, rows(t, sqlS.db, q), q)
				}
			}
			goIDs := rows(t, goS.db, `SELECT event_id FROM processed_event ORDER BY 1`)
			require.Len(t, goIDs, len(tc.evs)-tc.wantFailures, "each good event once, no bad one")
			for _, sqlS := range sqlSides {
				require.Equal(t, goIDs, rows(t, sqlS.db, `SELECT event_id FROM processed_event ORDER BY 1`))
			}
		})
	}
}

// examples/shop-sql's migrations are the Go shop's files: the two shops'
// tables are the same.
func TestShopSQLMigrationsAreTheShops(t *testing.T) {
	t.Parallel()
	for sqlFile, goFile := range map[string]string{
		"order/001_orders.sql":          "order/001_orders.sql",
		"stock/001_reservation.sql":     "stock/001_reservation.sql",
		"shipping/001_order_status.sql": "shipping/001_order_status.sql",
		"shipping/002_parcel.sql":       "parcel/001_parcel.sql",
	} {
		a, err := os.ReadFile(filepath.Join("..", "shop-sql", "migrations", sqlFile))
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join("migrations", goFile))
		require.NoError(t, err)
		require.Equal(t, string(b), string(a), "examples/shop-sql/migrations/%s differs from examples/shop/migrations/%s", sqlFile, goFile)
	}
	entries, err := filepath.Glob(filepath.Join("..", "shop-sql", "migrations", "*", "*.sql"))
	require.NoError(t, err)
	require.Len(t, entries, 4, "a new file in examples/shop-sql/migrations needs its Go counterpart here")
}

// goCatalog adapts the registry to config.HandlerCatalog, as the daemon
// does, so that the SQL handlers' names are checked against the Go ones.
type goCatalog struct{ reg *consumer.Registry }

func (c goCatalog) HandlerEvents(name string) ([]string, bool) {
	r, err := c.reg.Lookup(name)
	return r.Events, err == nil
}
