package dedup_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/dedup"
)

// BenchmarkRecordIDs measures the dedup step's statement alone (one
// INSERT ... ON CONFLICT DO NOTHING RETURNING per batch, rolled back), so
// that its time and allocations per batch show without the handlers' (run
// with -benchmem; allocs/op is per batch, pgx's encoding of the ids and
// the returned map included).
func BenchmarkRecordIDs(b *testing.B) {
	tb := setup(b)
	ctx := context.Background()
	for _, size := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			ids := make([][16]byte, size)
			for b.Loop() {
				b.StopTimer()
				for i := range ids {
					ids[i] = uuid.Must(uuid.NewV7())
				}
				tx, err := tb.db.BeginTx(ctx, pgx.TxOptions{})
				require.NoError(b, err)
				b.StartTimer()
				inserted, err := dedup.RecordIDs(ctx, tx, ids)
				b.StopTimer()
				require.NoError(b, err)
				require.Len(b, inserted, size)
				require.NoError(b, tx.Rollback(ctx))
				b.StartTimer()
			}
		})
	}
}
