package config

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDatabaseBudget(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		c, err := parseWith(t, baseYAML, nil)
		require.NoError(t, err)
		require.Equal(t, DatabaseBudgetConfig{MaxConns: DatabaseBudgetMaxConnsDefault}, c.DatabaseBudget)
		require.False(t, c.DatabaseBudget.Enabled())
	})

	t.Run("Set", func(t *testing.T) {
		t.Parallel()
		for _, n := range []int{0, 3, 180} { // baseYAML has 2 services: 3 is the least
			c, err := parseWith(t, baseYAML+"database_budget:\n  max_conns: "+strconv.Itoa(n)+"\n", nil)
			require.NoError(t, err, "max_conns %d", n)
			require.Equal(t, n, c.DatabaseBudget.MaxConns)
			require.Equal(t, n > 0, c.DatabaseBudget.Enabled())
		}
	})

	for _, tc := range []struct {
		name, yaml, path, msg string
	}{
		{"TooFewForTheServices", "database_budget: {max_conns: 2}\n", "database_budget.max_conns",
			"must be 0 or at least 3 (got 2): each of the 2 services holds a control session"},
		{"ProducerServicesCount", producerServiceAtEnd + "database_budget: {max_conns: 3}\n", "database_budget.max_conns", "must be 0 or at least 4 (got 3)"},
		{"Negative", "database_budget: {max_conns: -1}\n", "database_budget.max_conns", "must be 0 (no cap) or between 3 and 1000000 (got -1)"},
		{"UnknownKey", "database_budget: {max: 3}\n", "database_budget.max", "unknown key"},
		{"NotANumber", "database_budget: {max_conns: many}\n", "database_budget.max_conns", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseWith(t, baseYAML+tc.yaml, nil)
			ps := requireProblems(t, err)
			require.Len(t, ps, 1, "%v", ps)
			require.Equal(t, tc.path, ps[0].Path)
			require.Contains(t, ps[0].Message, tc.msg)
		})
	}
}

// producerServiceAtEnd is a third service, at the end of baseYAML's list,
// followed by a top-level key.
const producerServiceAtEnd = producerService + "    outbox: {}\n"
