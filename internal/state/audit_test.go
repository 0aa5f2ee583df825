package state_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver for goose
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/state"
	"github.com/platformd/platformd/internal/testdb"
	"github.com/platformd/platformd/migrations"
)

// The actions that change shared state record who did them, in the same
// transaction, and the list reads them back newest first.
func TestAuditRecordsActions(t *testing.T) {
	t.Parallel()
	db := newStateDB(t)
	ctx := context.Background()

	_, err := state.SetPoolPaused(ctx, db, "stock-events", true, "incident 42", "ops")
	require.NoError(t, err)
	_, err = state.SetPoolPaused(ctx, db, "stock-events", false, "", "ops2")
	require.NoError(t, err)
	_, err = state.SetHorizon(ctx, db, "stock", 48*time.Hour, 24*time.Hour, false, "ops")
	require.NoError(t, err)
	_, err = state.SetHorizon(ctx, db, "stock", 12*time.Hour, 24*time.Hour, true, "ops3")
	require.NoError(t, err)
	require.NoError(t, state.AppendAudit(ctx, db, "ops", state.AuditFailedRetry, "stock-events",
		map[string]any{"retried": 1000000, "all": true}))
	// A refused change records nothing.
	_, err = state.SetHorizon(ctx, db, "stock", time.Hour, 24*time.Hour, false, "ops")
	require.ErrorIs(t, err, state.ErrBelowMinHorizon)

	got, err := state.ListAudit(ctx, db, 0)
	require.NoError(t, err)
	require.Len(t, got, 5)
	type row struct{ Actor, Action, Target, Detail string }
	rows := make([]row, len(got))
	for i, e := range got {
		d, err := json.Marshal(e.Detail)
		require.NoError(t, err)
		rows[i] = row{e.Actor, e.Action, e.Target, string(d)}
		if i > 0 {
			require.False(t, e.At.After(got[i-1].At), "newest first")
		}
	}
	require.Equal(t, []row{
		{"ops", state.AuditFailedRetry, "stock-events", `{"all":true,"retried":1000000}`},
		{"ops3", state.AuditHorizonSet, "stock", `{"force":true,"forced":true,"from":"48h0m0s","to":"12h0m0s"}`},
		{"ops", state.AuditHorizonSet, "stock", `{"force":false,"forced":false,"from":null,"to":"48h0m0s"}`},
		{"ops2", state.AuditPoolResume, "stock-events", `{}`},
		{"ops", state.AuditPoolPause, "stock-events", `{"reason":"incident 42"}`},
	}, rows)

	two, err := state.ListAudit(ctx, db, 2)
	require.NoError(t, err)
	require.Len(t, two, 2)
	require.Equal(t, got[0].ID, two[0].ID)
}

// The audit log is append-only: neither the daemon nor a stray statement
// can rewrite it.
func TestAuditAppendOnly(t *testing.T) {
	t.Parallel()
	db := newStateDB(t)
	ctx := context.Background()
	require.NoError(t, state.AppendAudit(ctx, db, "ops", state.AuditPurgeRun, "stock", nil))
	for _, q := range []string{
		`UPDATE platform.audit_log SET actor = 'someone else'`,
		`DELETE FROM platform.audit_log`,
		`TRUNCATE platform.audit_log`,
	} {
		_, err := db.Exec(ctx, q)
		require.ErrorContains(t, err, "append-only", q)
	}
	got, err := state.ListAudit(ctx, db, 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "ops", got[0].Actor)
	require.Equal(t, map[string]any{}, got[0].Detail)
}

// Migration 004 copies the horizon changes recorded before it existed.
func TestAuditMigrationKeepsHorizonHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.New(t, t.Name())
	sqlDB, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	defer sqlDB.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, migrations.Platform(), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	_, err = p.UpTo(ctx, 2)
	require.NoError(t, err)
	_, err = sqlDB.ExecContext(ctx, `INSERT INTO platform.horizon_audit
		(service, old_horizon, new_horizon, forced, changed_at, changed_by) VALUES
		('stock', NULL, interval '336 hours', false, now() - interval '2 days', 'ops'),
		('stock', interval '336 hours', interval '90 minutes 1.5 seconds', true, now() - interval '1 day', 'ops2')`)
	require.NoError(t, err)
	_, err = p.Up(ctx)
	require.NoError(t, err)

	db, err := dedup.Connect(ctx, dsn, dedup.ConnectConfig{MaxConns: 2})
	require.NoError(t, err)
	defer db.Close()
	got, err := state.ListAudit(ctx, db, 10)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, "ops2", got[0].Actor)
	require.Equal(t, state.AuditHorizonSet, got[0].Action)
	require.Equal(t, "stock", got[0].Target)
	require.Equal(t, map[string]any{"from": "336h0m0s", "to": "1h30m1.5s", "forced": true}, got[0].Detail)
	require.Equal(t, map[string]any{"from": nil, "to": "336h0m0s", "forced": false}, got[1].Detail)
	// What the daemon writes from now on has the same form.
	d, err := time.ParseDuration(got[0].Detail["to"].(string))
	require.NoError(t, err)
	require.Equal(t, 90*time.Minute+1500*time.Millisecond, d)
}
