package outbox

import (
	"context"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/testdb"
)

// The relay's statements are named queries: their errors name them (and
// keep PostgreSQL's error reachable), the delete's too, though it runs in
// a pipeline of two.
func TestRelayErrorsNameTheQuery(t *testing.T) {
	ctx := context.Background()
	// A database without the platform schema: every statement fails.
	db, err := dedup.Connect(ctx, testdb.New(t, "outbox"), dedup.ConnectConfig{MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(db.Close)

	_, _, err = Stats(ctx, db)
	require.ErrorContains(t, err, "outbox.stats: ")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, pgerrcode.UndefinedTable, pgErr.Code)

	conn, err := db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	r := &Relay{cfg: Config{BatchSize: 10}}
	_, err = r.selectRows(ctx, conn, nil)
	require.ErrorContains(t, err, "outbox.select_batch: ")
	for archive, name := range map[bool]string{false: "outbox.delete_published: ", true: "outbox.archive_published: "} {
		err = deleteRows(ctx, conn, [][16]byte{{1}}, archive)
		require.ErrorContains(t, err, name)
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, pgerrcode.UndefinedTable, pgErr.Code)
	}
}
