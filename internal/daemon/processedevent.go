package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/platformd/platformd/internal/query"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/connbudget"
	"github.com/platformd/platformd/internal/dbpool"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/state"
)

// wantLayout is the processed_event layout a service's configuration asks
// for.
func wantLayout(s config.ServiceConfig) dedup.Layout {
	if s.ProcessedEvent.Partitioned() {
		return dedup.LayoutPartitioned
	}
	return dedup.LayoutPlain
}

// layoutDB opens a small pool on s's database for layout work, its
// connections under budget (nil: none), and reads the service's horizon
// (as stored, or configured); the caller closes the pool.
func layoutDB(ctx context.Context, s config.ServiceConfig, budget *connbudget.Budget) (*pgxpool.Pool, time.Duration, error) {
	db, err := dedup.Connect(ctx, s.Database, dedup.ConnectConfig{MaxConns: 2, ApplicationName: "platformd-migrate", Pooler: s.Pooler(), Budget: budget})
	if err != nil {
		return nil, 0, err
	}
	h, err := state.GetHorizon(ctx, db, s.Name, s.Horizon, s.MinHorizon)
	if err != nil {
		db.Close()
		return nil, 0, err
	}
	return db, h.Horizon, nil
}

// ensureProcessedEvent gives an empty processed_event the configured
// layout, or checks that it has it, and creates a partitioned table's
// partitions ahead (migrate and run do it for every service). A table of
// rows in the other layout is an error naming the fixes.
func ensureProcessedEvent(ctx context.Context, s config.ServiceConfig, budget *connbudget.Budget) error {
	db, horizon, err := layoutDB(ctx, s, budget)
	if err != nil {
		return err
	}
	defer db.Close()
	want := wantLayout(s)
	if err := dedup.EnsureLayout(ctx, db, want, horizon, s.ProcessedEvent.Ahead); err != nil {
		return fmt.Errorf("%w (processed_event.partitions is %q: make it match the table, or convert the table with `platformd migrate -config FILE -processed-event %s -service %s`)",
			err, s.ProcessedEvent.Partitions, want, s.Name)
	}
	return nil
}

// ConvertProcessedEvent converts the processed_event table of the named
// service to layout ("plain" or "partitioned") with dedup.ConvertLayout,
// after applying that service's migrations: the `platformd migrate
// -processed-event L -service S` command. It runs online (one transaction
// that locks the table; consumers wait for it, see dedup.ConvertLayout)
// and logs what it copied, with a warning when the configuration asks for
// the other layout (the next run would refuse the table).
func ConvertProcessedEvent(ctx context.Context, cfg *config.Config, reg *consumer.Registry, service, layout string, logger *slog.Logger) error {
	to, err := dedup.ParseLayout(layout)
	if err != nil {
		return err
	}
	s, ok := cfg.Service(service)
	if !ok {
		return fmt.Errorf("-service %q: no such service in the configuration", service)
	}
	// The migrations, not migrateService: that checks the table against the
	// configuration, which may still name the layout being left.
	sets, err := migrateSets(s, reg)
	if err != nil {
		return err
	}
	if err := applyMigrations(ctx, s, sets, nil, logger); err != nil {
		return err
	}
	db, horizon, err := layoutDB(ctx, s, nil)
	if err != nil {
		return fmt.Errorf("service %s: %w", s.Name, err)
	}
	defer db.Close()
	start := time.Now()
	res, err := dedup.ConvertLayout(ctx, db, to, dedup.ConvertParams{Horizon: horizon, Ahead: s.ProcessedEvent.Ahead})
	if err != nil {
		return fmt.Errorf("service %s: %w", s.Name, err)
	}
	logger.InfoContext(ctx, "platformd: processed_event converted", slog.String("service", s.Name),
		slog.String("from", res.From.String()), slog.String("to", res.To.String()), slog.Int64("copied", res.Copied),
		slog.Int64("left_expired", res.Expired), slog.Int("partitions", res.Partitions), slog.Duration("duration", time.Since(start)))
	if wantLayout(s) != to {
		logger.WarnContext(ctx, "platformd: the configuration asks for the other processed_event layout: set processed_event.partitions (daily for partitioned, absent for plain) before the next run, which refuses a table that does not match",
			slog.String("service", s.Name), slog.String("table", to.String()), slog.String("configured", wantLayout(s).String()))
	}
	return nil
}

// horizonInForce is h as the purge applies it to the service's table
// (rounded up to whole partitions when partitioned); h when the layout
// cannot be read.
func horizonInForce(ctx context.Context, db query.Querier, h time.Duration) time.Duration {
	l, err := dedup.DetectLayout(ctx, db)
	if err != nil {
		return h
	}
	return dedup.HorizonInForce(l, h)
}

// processedEventHorizon adds the partition figures to a service's
// horizon: the horizon in force and the partitions' width.
func processedEventHorizon(ctx context.Context, db dbpool.DB, info admin.HorizonInfo) admin.HorizonInfo {
	info.InForce = info.Horizon
	if l, err := dedup.DetectLayout(ctx, db); err == nil && l == dedup.LayoutPartitioned {
		info.InForce, info.PartitionWidth = dedup.HorizonInForce(l, info.Horizon), dedup.PartitionWidth
	}
	return info
}

// purgeableAt is when a row of id processed at is purgeable from db's
// processed_event.
func purgeableAt(ctx context.Context, db dbpool.DB, id [16]byte, at time.Time, h time.Duration) time.Time {
	l, err := dedup.DetectLayout(ctx, db)
	if err != nil {
		l = dedup.LayoutPlain
	}
	return dedup.PurgeableAt(l, id, at, h)
}
