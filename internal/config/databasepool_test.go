package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDatabasePoolDefaults(t *testing.T) {
	t.Parallel()
	c, err := parseWith(t, baseYAML+producerService+"    outbox: {}\n    database_pool: {max_conns: 7, min_conns: 1, max_idle: 2m}\n", nil)
	require.NoError(t, err)
	s, _ := c.Service("order")
	require.Equal(t, DatabasePoolConfig{MaxConns: 7, MaxConnsSet: true, MinConns: 1, MaxIdle: 2 * time.Minute}, s.DatabasePool)
	require.False(t, s.Pooler())

	c, err = parseWith(t, baseYAML+producerService+"    outbox: {}\n    database_mode: pooler\n", nil)
	require.NoError(t, err)
	s, _ = c.Service("order")
	require.True(t, s.Pooler())
	require.Equal(t, "postgres://postgres@127.0.0.1:5432/order?default_query_exec_mode=cache_describe", s.Database)
	require.Equal(t, "host=h dbname=d default_query_exec_mode=cache_describe", PoolerDSN("host=h dbname=d"))
	require.Equal(t, "postgres://h/d?default_query_exec_mode=exec", PoolerDSN("postgres://h/d?default_query_exec_mode=exec"))

	// Derived: the pools' concurrency plus the spare, nothing kept idle.
	stock, _ := c.Service("stock")
	want := DatabasePoolSpareConns
	for _, p := range stock.Pools {
		want += p.Concurrency
	}
	require.Equal(t, DatabasePoolConfig{MaxConns: want, MaxIdle: DatabasePoolMaxIdleDefault}, stock.DatabasePool)
}

func TestDatabasePoolValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml, path, msg string
	}{
		{"MaxConns", "    database_pool: {max_conns: 1}\n", "services[2].database_pool.max_conns", "must be between 2 and 1000 (got 1)"},
		{"MinConns", "    database_pool: {max_conns: 4, min_conns: 5}\n", "services[2].database_pool.min_conns", "must be between 0 and max_conns (4) (got 5)"},
		{"MaxIdle", "    database_pool: {max_idle: 10ms}\n", "services[2].database_pool.max_idle", "must be between 1s and 24h (got 10ms)"},
		{"UnknownKey", "    database_pool: {max: 3}\n", "services[2].database_pool.max", "unknown key"},
		{"Mode", "    database_mode: bouncer\n", "services[2].database_mode", "pooler"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseWith(t, baseYAML+producerService+"    outbox: {}\n"+tc.yaml, nil)
			ps := requireProblems(t, err)
			require.Len(t, ps, 1, "%v", ps)
			require.Equal(t, tc.path, ps[0].Path)
			require.Contains(t, ps[0].Message, tc.msg)
		})
	}
}
