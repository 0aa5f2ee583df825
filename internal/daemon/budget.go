package daemon

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/connbudget"
)

// newBudget returns the connection budget of cfg's database_budget, nil
// when it caps nothing.
func newBudget(cfg *config.Config, logger *slog.Logger) *connbudget.Budget {
	return connbudget.New(connbudget.Config{MaxConns: cfg.DatabaseBudget.MaxConns, Logger: logger})
}

// startBudget exposes the daemon's connection budget as metrics and starts
// its reclaim of idle connections; without a budget it does nothing.
func (d *Daemon) startBudget(ctx context.Context) error {
	if d.budget == nil {
		return nil
	}
	b := d.budget
	err := d.metrics.RegisterDatabaseBudget(
		func() float64 { return float64(b.Conns()) },
		func() float64 { return float64(b.Waits()) },
	)
	if err != nil {
		return fmt.Errorf("daemon: database budget metrics: %w", err)
	}
	if err := b.Start(ctx); err != nil {
		return fmt.Errorf("daemon: database budget: %w", err)
	}
	d.log.InfoContext(ctx, "daemon: database connections capped across services", slog.Int("max_conns", b.MaxConns()))
	return nil
}
