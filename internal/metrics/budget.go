package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Names of the database budget's collectors (database_budget).
const (
	// DatabaseBudgetConnsName is the gauge of the connections held under
	// the daemon's database budget.
	DatabaseBudgetConnsName = "platformd_database_budget_conns"
	// DatabaseBudgetWaitsName is the counter of the dials that had to wait
	// for a connection of the budget.
	DatabaseBudgetWaitsName = "platformd_database_budget_waits_total"
)

// RegisterDatabaseBudget registers the collectors of the daemon's database
// budget, read from conns (connections held now) and waits (dials that
// waited so far) at each scrape. It is called once, when a budget is set:
// without one, neither series exists. Calling it twice is an error.
func (m *Metrics) RegisterDatabaseBudget(conns func() float64, waits func() float64) error {
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: DatabaseBudgetConnsName, Help: "Connections the daemon holds to its services' databases under database_budget.max_conns.",
	}, conns)
	c := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: DatabaseBudgetWaitsName, Help: "Database dials that had to wait for a connection of database_budget.max_conns.",
	}, waits)
	if err := m.Registry.Register(g); err != nil {
		return fmt.Errorf("metrics: register %s: %w", DatabaseBudgetConnsName, err)
	}
	if err := m.Registry.Register(c); err != nil {
		return fmt.Errorf("metrics: register %s: %w", DatabaseBudgetWaitsName, err)
	}
	return nil
}
