package daemon

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/config"
)

// TestReloadRefusesABudgetChange: the services' pools hold tokens of the
// budget in force, so a reload cannot swap it; it names the key instead.
func TestReloadRefusesABudgetChange(t *testing.T) {
	t.Parallel()
	old := &config.Config{DatabaseBudget: config.DatabaseBudgetConfig{MaxConns: 10}}
	same := &config.Config{DatabaseBudget: config.DatabaseBudgetConfig{MaxConns: 10}}
	changed := &config.Config{DatabaseBudget: config.DatabaseBudgetConfig{MaxConns: 20}}
	off := &config.Config{}
	require.Empty(t, needsRestart(old, same))
	require.Equal(t, []string{"database_budget"}, needsRestart(old, changed))
	require.Equal(t, []string{"database_budget"}, needsRestart(old, off))
	require.Nil(t, newBudget(off, nil), "no budget: nothing wraps the dials")
	require.Equal(t, 10, newBudget(old, nil).MaxConns())
}
