package dedup_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/dedup"
)

func TestEstimateRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := setup(t).db
	n, err := dedup.EstimateRows(ctx, db)
	require.NoError(t, err)
	require.LessOrEqual(t, n, int64(0), "a fresh table: unknown or empty")

	_, err = db.Exec(ctx, `INSERT INTO processed_event SELECT gen_random_uuid(), now() FROM generate_series(1, 5000)`)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `ANALYZE processed_event`)
	require.NoError(t, err)
	n, err = dedup.EstimateRows(ctx, db)
	require.NoError(t, err)
	require.InDelta(t, 5000, n, 500, "not counted twice after an ANALYZE")
}
