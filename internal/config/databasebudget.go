package config

// DatabaseBudgetMaxConnsDefault is the default database_budget.max_conns:
// no cap.
const DatabaseBudgetMaxConnsDefault = 0

// databaseBudgetMaxConnsMax bounds database_budget.max_conns far above any
// PostgreSQL server's max_connections, to catch a typo.
const databaseBudgetMaxConnsMax = 1_000_000

// DatabaseBudgetConfig caps the connections the daemon holds to all its
// services' databases at once (database_budget; package connbudget). A
// burst beyond it waits for a connection instead of filling the server.
// A reload that changes it is refused: it needs a restart.
type DatabaseBudgetConfig struct {
	// MaxConns is the most connections the daemon holds to all its
	// services' databases (and their servers' maintenance database, to
	// create them) at once: 0 (default) means no cap, else at least the
	// number of services plus one (each service's control session, and
	// one connection to share).
	MaxConns int `yaml:"max_conns"`
}

// Enabled reports whether the budget caps anything.
func (b DatabaseBudgetConfig) Enabled() bool { return b.MaxConns > 0 }

// databaseBudget applies the database_budget block's default and checks
// it against the services.
func (v *validator) databaseBudget() {
	b := &v.c.DatabaseBudget
	if !v.isSet("database_budget.max_conns") {
		b.MaxConns = DatabaseBudgetMaxConnsDefault
	}
	least := len(v.c.Services) + 1
	switch {
	case b.MaxConns == 0:
	case b.MaxConns < 0 || b.MaxConns > databaseBudgetMaxConnsMax:
		v.ps.add("database_budget.max_conns", "must be 0 (no cap) or between %d and %d (got %d)", least, databaseBudgetMaxConnsMax, b.MaxConns)
	case b.MaxConns < least:
		v.ps.add("database_budget.max_conns", "must be 0 or at least %d (got %d): each of the %d services holds a control session, and they need one connection more to share",
			least, b.MaxConns, len(v.c.Services))
	}
}
