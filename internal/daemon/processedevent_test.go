package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/testdb"
)

// writeConfig writes a one-service configuration on dsn; extra is added
// to the service block.
func writeConfig(t *testing.T, dir, name, dsn, extra string) string {
	t.Helper()
	cfg := fmt.Sprintf(`admin:
  tokens: [{name: ops, role: admin, token: "admin-token-0123456789"}]
services:
  - name: stock
    database: %q
    horizon: 48h
%s    pools:
      - name: stock-events
        queue: stock.events
        bindings: [order.order.placed.v1]
        handlers: [stock.reserve]
`, dsn, extra)
	path := filepath.Join(dir, name+".yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	return path
}

func runMain(t *testing.T, args ...string) (int, string) {
	t.Helper()
	reg := consumer.NewRegistry()
	require.NoError(t, shop.Register(reg))
	var out bytes.Buffer
	code := Main(args, reg, &out)
	return code, out.String()
}

// `platformd migrate -processed-event L -service S` converts the table
// both ways with its rows; plain `migrate` then checks the table against
// the configuration, and refuses a table of rows in the other layout.
func TestMigrateProcessedEventCommand(t *testing.T) {
	t.Parallel()
	dsn := testdb.New(t, t.Name())
	dir := t.TempDir()
	plainCfg := writeConfig(t, dir, "plain", dsn, "")
	code, out := runMain(t, "migrate", "-config", plainCfg)
	require.Equal(t, 0, code, out)

	ctx := context.Background()
	db, err := dedup.Connect(ctx, dsn, dedup.ConnectConfig{MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(db.Close)
	layout := func() dedup.Layout {
		l, err := dedup.DetectLayout(ctx, db)
		require.NoError(t, err)
		return l
	}
	require.Equal(t, dedup.LayoutPlain, layout())
	ids := make([]uuid.UUID, 500)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	_, err = db.Exec(ctx, `INSERT INTO processed_event SELECT unnest($1::uuid[]), now()`, ids)
	require.NoError(t, err)
	count := func() int {
		var n int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM processed_event WHERE event_id = ANY($1)`, ids).Scan(&n))
		return n
	}

	// Flags go together, and with migrate only.
	code, out = runMain(t, "migrate", "-config", plainCfg, "-processed-event", "partitioned")
	require.Equal(t, 2, code, out)
	code, out = runMain(t, "run", "-config", plainCfg, "-processed-event", "partitioned", "-service", "stock")
	require.Equal(t, 2, code, out)
	code, out = runMain(t, "migrate", "-config", plainCfg, "-processed-event", "daily", "-service", "stock")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, `-processed-event is plain or partitioned, not "daily"`)
	code, out = runMain(t, "migrate", "-config", plainCfg, "-processed-event", "partitioned", "-service", "billing")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "no such service")

	code, out = runMain(t, "migrate", "-config", plainCfg, "-processed-event", "partitioned", "-service", "stock")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "processed_event converted")
	require.Contains(t, out, "the configuration asks for the other processed_event layout")
	require.Equal(t, dedup.LayoutPartitioned, layout())
	require.Equal(t, len(ids), count())

	// The configuration still says plain: migrate (and so run) refuse.
	code, out = runMain(t, "migrate", "-config", plainCfg)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "platformd migrate -config FILE -processed-event plain -service stock")
	partCfg := writeConfig(t, dir, "partitioned", dsn, "    processed_event: {partitions: daily, ahead: 5}\n")
	code, out = runMain(t, "migrate", "-config", partCfg)
	require.Equal(t, 0, code, out)
	parts, err := dedup.ListPartitions(ctx, db)
	require.NoError(t, err)
	var now time.Time
	require.NoError(t, db.QueryRow(ctx, `SELECT now()`).Scan(&now))
	require.Equal(t, now.UTC().Truncate(24*time.Hour).Add(5*24*time.Hour), parts[len(parts)-1].From, "migrate creates the partitions ahead")

	code, out = runMain(t, "migrate", "-config", partCfg, "-processed-event", "plain", "-service", "stock")
	require.Equal(t, 0, code, out)
	require.Equal(t, dedup.LayoutPlain, layout())
	require.Equal(t, len(ids), count())
	code, out = runMain(t, "migrate", "-config", plainCfg)
	require.Equal(t, 0, code, out)
}

// GetHorizon's figures: the horizon in force is rounded up to whole
// partitions on a partitioned table, the guard applies it too, and a
// lookup's purgeable_at is its partition's end plus that horizon.
func TestHorizonInForcePartitioned(t *testing.T) {
	t.Parallel()
	dsn := testdb.New(t, t.Name())
	cfg := writeConfig(t, t.TempDir(), "partitioned", dsn, "    processed_event: {partitions: daily}\n")
	code, out := runMain(t, "migrate", "-config", cfg)
	require.Equal(t, 0, code, out)
	ctx := context.Background()
	db, err := dedup.Connect(ctx, dsn, dedup.ConnectConfig{MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(db.Close)

	info := processedEventHorizon(ctx, db, admin.HorizonInfo{Service: "stock", Horizon: 30 * time.Hour})
	require.Equal(t, 30*time.Hour, info.Horizon, "the horizon as set is reported unchanged")
	require.Equal(t, 48*time.Hour, info.InForce)
	require.Equal(t, 24*time.Hour, info.PartitionWidth)
	require.Equal(t, 48*time.Hour, horizonInForce(ctx, db, 30*time.Hour))
	id := uuid.Must(uuid.NewV7())
	at := dedup.V7Time(id)
	require.Equal(t, at.UTC().Truncate(24*time.Hour).Add(72*time.Hour), purgeableAt(ctx, db, id, at, 30*time.Hour).UTC())

	// The plain table: the horizon itself, no width.
	plain := testdb.New(t, t.Name()+"_plain")
	code, out = runMain(t, "migrate", "-config", writeConfig(t, t.TempDir(), "plain", plain, ""))
	require.Equal(t, 0, code, out)
	pdb, err := dedup.Connect(ctx, plain, dedup.ConnectConfig{MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(pdb.Close)
	info = processedEventHorizon(ctx, pdb, admin.HorizonInfo{Service: "stock", Horizon: 30 * time.Hour})
	require.Equal(t, 30*time.Hour, info.InForce)
	require.Zero(t, info.PartitionWidth)
	require.Equal(t, at.Add(30*time.Hour), purgeableAt(ctx, pdb, id, at, 30*time.Hour))
}
