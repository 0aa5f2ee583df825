package config

import (
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// baseYAML is a valid config every validation case edits.
const baseYAML = `log: {level: info, format: json}
admin:
  listen: 127.0.0.1:7070
  tokens:
    - {name: ops, role: admin, token: "admin-token-0123456789"}
    - {name: dash, role: read, token: "read-token-0123456789"}
metrics: {listen: 127.0.0.1:9464}
broker: {url: "amqp://guest:guest@127.0.0.1:5672/", exchange: events, max_body_bytes: 1048576}
services:
  - name: stock
    database: postgres://postgres@127.0.0.1:5432/stock
    horizon: 336h
    min_horizon: 24h
    beyond_horizon: quarantine
    purge: {every: 15m, batch_size: 10000}
    pools:
      - name: stock-events
        queue: stock.events
        queue_type: quorum
        bindings: [order.order.placed.v1]
        handlers: [stock.reserve]
        concurrency: 4
        prefetch: 400
        batch: {size: 100, wait: 5ms}
        retry: {delays: [1s, 10s, 1m, 10m]}
  - name: shipping
    database: "host=127.0.0.1 user=postgres dbname=shipping"
    pools:
      - name: shipping-events
        queue: shipping.events
        bindings: ["order.order.*.v1"]
        handlers: [shipping.track_status]
`

func TestBaseIsValid(t *testing.T) {
	t.Parallel()
	c, err := parseWith(t, baseYAML, nil)
	require.NoError(t, err)
	require.Len(t, c.Services, 2)
}

func TestLoadFullSample(t *testing.T) {
	t.Parallel()
	const adminToken = "admin-token-from-env-0123"
	c, err := load(filepath.Join("testdata", "full.yaml"), catalog, env{"PLATFORMD_ADMIN_TOKEN": adminToken}.lookup)
	require.NoError(t, err)

	require.Equal(t, LogConfig{Level: "info", Format: "json"}, c.Log)
	require.Equal(t, "127.0.0.1:7070", c.Admin.Listen)
	require.Equal(t, []TokenConfig{
		{Name: "ops", Role: RoleAdmin, Token: adminToken},
		{Name: "dashboards", Role: RoleRead, Token: "read-token-0123456789abcdef", TokenFile: filepath.Join("testdata", "read.token")},
	}, c.Admin.Tokens)
	require.Equal(t, TLSConfig{}, c.Admin.TLS)
	require.False(t, c.Admin.TLS.Enabled())
	require.Equal(t, MetricsConfig{Listen: "127.0.0.1:9464"}, c.Metrics)
	require.Equal(t, BrokerConfig{URL: "amqp://guest:guest@127.0.0.1:5672/", Exchange: "events", MaxBodyBytes: 1 << 20}, c.Broker)

	delays := []time.Duration{time.Second, 10 * time.Second, time.Minute, 10 * time.Minute}
	require.Equal(t, []ServiceConfig{
		{
			Name:          "stock",
			Database:      "postgres://postgres@127.0.0.1:5432/stock",
			Horizon:       336 * time.Hour,
			MinHorizon:    24 * time.Hour,
			BeyondHorizon: BeyondHorizonQuarantine,
			Purge:         PurgeConfig{Every: 15 * time.Minute, BatchSize: 10000},
			Pools: []PoolConfig{{
				Name:        "stock-events",
				Queue:       "stock.events",
				QueueType:   QueueQuorum,
				Bindings:    []string{"order.order.placed.v1"},
				Handlers:    []string{"stock.reserve"},
				Concurrency: 4,
				Prefetch:    400,
				Batch:       BatchConfig{Size: 100, Wait: 5 * time.Millisecond},
				Retry:       RetryConfig{Delays: delays},
				// The sample's explicit prefetch and batch.size are kept; the
				// budget it does not name takes its default.
				MaxUnackedBytes: MaxUnackedBytesDefault,
			}},
			Outbox:       OutboxConfig{Relay: true, BatchSize: OutboxBatchSizeDefault, Poll: OutboxPollDefault, Unroutable: OutboxUnroutableDefault},
			DatabasePool: DatabasePoolConfig{MaxConns: 4 + DatabasePoolSpareConns, MaxIdle: DatabasePoolMaxIdleDefault},
			DatabaseMode: DatabaseModeDirect, Failures: ServiceFailuresConfig{Retention: FailureRetentionDefault},
		},
		{
			Name:          "shipping",
			Database:      "postgres://postgres@127.0.0.1:5432/shipping",
			Horizon:       336 * time.Hour,
			MinHorizon:    24 * time.Hour,
			BeyondHorizon: BeyondHorizonQuarantine,
			Purge:         PurgeConfig{Every: 15 * time.Minute, BatchSize: 10000},
			Pools: []PoolConfig{{
				Name:        "shipping-events",
				Queue:       "shipping.events",
				QueueType:   QueueQuorum,
				Bindings:    []string{"order.order.status_changed.v1"},
				Handlers:    []string{"shipping.track_status"},
				Concurrency: 4,
				Prefetch:    400,
				Batch:       BatchConfig{Size: 100, Wait: 5 * time.Millisecond},
				Retry:       RetryConfig{Delays: delays},
				// The sample's explicit prefetch and batch.size are kept; the
				// budget it does not name takes its default.
				MaxUnackedBytes: MaxUnackedBytesDefault,
			}},
			Outbox:       OutboxConfig{Relay: true, BatchSize: OutboxBatchSizeDefault, Poll: OutboxPollDefault, Unroutable: OutboxUnroutableDefault},
			DatabasePool: DatabasePoolConfig{MaxConns: 4 + DatabasePoolSpareConns, MaxIdle: DatabasePoolMaxIdleDefault},
			DatabaseMode: DatabaseModeDirect, Failures: ServiceFailuresConfig{Retention: FailureRetentionDefault},
		},
	}, c.Services)

	svc, pool, ok := c.Pool("shipping-events")
	require.True(t, ok)
	require.Equal(t, "shipping", svc.Name)
	require.Equal(t, "shipping.events", pool.Queue)
	require.Equal(t, 11*time.Minute+11*time.Second, pool.RetrySpan())
	require.Equal(t, 5, pool.Retry.Attempts())
	_, _, ok = c.Pool("nope")
	require.False(t, ok)

	svc, ok = c.Service("stock")
	require.True(t, ok)
	require.Equal(t, "stock-events", svc.Pools[0].Name)
	_, ok = c.Service("nope")
	require.False(t, ok)
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()

	t.Run("MissingFile", func(t *testing.T) {
		t.Parallel()
		_, err := Load(filepath.Join(t.TempDir(), "missing.yaml"), catalog)
		require.ErrorIs(t, err, fs.ErrNotExist)
	})

	t.Run("UnsetVariable", func(t *testing.T) {
		t.Parallel()
		_, err := load(filepath.Join("testdata", "full.yaml"), catalog, env{}.lookup)
		require.Equal(t, []Problem{{
			Path:    "admin.tokens[0].token",
			Message: `environment variable "PLATFORMD_ADMIN_TOKEN" is not set`,
		}}, requireProblems(t, err))
	})

	t.Run("ErrorText", func(t *testing.T) {
		t.Parallel()
		_, err := Parse("x.yaml", []byte("log: {level: loud}\nextra: 1\n"), catalog)
		require.EqualError(t, err, "extra: unknown key\n"+
			`log.level: must be one of debug, info, warn, error (got "loud")`+"\n"+
			"services: at least one service is required")
	})
}

func TestDefaults(t *testing.T) {
	t.Parallel()

	const minimal = `services:
  - name: stock
    database: postgres://localhost/stock
    pools:
      - name: stock-events
        queue: stock.events
        bindings: ["order.#"]
        handlers: [stock.reserve]
`

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		c, err := parseWith(t, minimal, nil)
		require.NoError(t, err)
		require.Equal(t, LogConfig{Level: "info", Format: "json"}, c.Log)
		require.Equal(t, AdminConfig{Listen: "127.0.0.1:7070"}, c.Admin)
		require.Equal(t, MetricsConfig{Listen: "127.0.0.1:9464"}, c.Metrics)
		require.Equal(t, BrokerConfig{URL: "amqp://guest:guest@127.0.0.1:5672/", Exchange: "events", MaxBodyBytes: 1048576}, c.Broker)
		s := c.Services[0]
		require.Equal(t, 336*time.Hour, s.Horizon)
		require.Equal(t, 24*time.Hour, s.MinHorizon)
		require.Equal(t, BeyondHorizonQuarantine, s.BeyondHorizon)
		require.Equal(t, PurgeConfig{Every: 15 * time.Minute, BatchSize: 10000}, s.Purge)
		p := s.Pools[0]
		require.Equal(t, QueueQuorum, p.QueueType)
		require.Equal(t, 4, p.Concurrency)
		require.Equal(t, BatchConfig{Size: 1000, Wait: 5 * time.Millisecond}, p.Batch)
		require.Equal(t, 8000, p.Prefetch)
		require.Equal(t, 1<<30, p.MaxUnackedBytes)
		// At the default body limit (1 MiB) the budget holds 1,024 bodies:
		// the pool runs with that prefetch, and the log says so.
		prefetch, capped := p.PrefetchFor(c.Broker.MaxBodyBytes)
		require.Equal(t, 1024, prefetch)
		require.True(t, capped)
		require.Equal(t, RetryDelaysDefault(), p.Retry.Delays)
		require.Equal(t, 5, p.Retry.Attempts())
	})

	t.Run("BrokerAddresses", func(t *testing.T) {
		t.Parallel()
		c, err := parseWith(t, minimal, nil)
		require.NoError(t, err)
		require.Equal(t, []string{BrokerURLDefault}, c.Broker.Addresses())
		urls := []string{"amqp://guest:guest@10.0.0.1:5672/", "amqp://guest:guest@10.0.0.2:5672/"}
		c, err = parseWith(t, "broker: {urls: [\""+urls[0]+"\", \""+urls[1]+"\"]}\n"+minimal, nil)
		require.NoError(t, err)
		require.Empty(t, c.Broker.URL, "broker.urls set: no default broker.url beside it")
		require.Equal(t, urls, c.Broker.Addresses())
	})

	t.Run("PrefetchFollowsConcurrencyAndBatch", func(t *testing.T) {
		t.Parallel()
		c, err := parseWith(t, minimal+"        concurrency: 2\n        batch: {size: 10}\n", nil)
		require.NoError(t, err)
		require.Equal(t, 40, c.Services[0].Pools[0].Prefetch)
	})

	t.Run("PrefetchDefaultCapped", func(t *testing.T) {
		t.Parallel()
		c, err := parseWith(t, minimal+"        concurrency: 256\n        batch: {size: 10000}\n", nil)
		require.NoError(t, err)
		require.Equal(t, PrefetchMax, c.Services[0].Pools[0].Prefetch)
	})

	t.Run("EmptyDelaysMeansNoRetry", func(t *testing.T) {
		t.Parallel()
		c, err := parseWith(t, minimal+"        retry: {delays: []}\n", nil)
		require.NoError(t, err)
		p := c.Services[0].Pools[0]
		require.NotNil(t, p.Retry.Delays)
		require.Empty(t, p.Retry.Delays)
		require.Equal(t, 1, p.Retry.Attempts())
		require.Zero(t, p.RetrySpan())
	})

	t.Run("NullIsAbsent", func(t *testing.T) {
		t.Parallel()
		c, err := parseWith(t, "log:\nadmin: {tls: ~}\n"+minimal+"        retry: {delays: ~}\n        batch:\n", nil)
		require.NoError(t, err)
		require.Equal(t, "info", c.Log.Level)
		require.Equal(t, RetryDelaysDefault(), c.Services[0].Pools[0].Retry.Delays)
		require.Equal(t, BatchSizeDefault, c.Services[0].Pools[0].Batch.Size)
	})

	t.Run("ExplicitZeroWaitKept", func(t *testing.T) {
		t.Parallel()
		c, err := parseWith(t, minimal+"        batch: {wait: 0s}\n", nil)
		require.NoError(t, err)
		require.Zero(t, c.Services[0].Pools[0].Batch.Wait)

		c, err = parseWith(t, minimal+"        batch: {wait: 0}\n", nil)
		require.NoError(t, err)
		require.Zero(t, c.Services[0].Pools[0].Batch.Wait)
	})

	t.Run("MetricsDisabled", func(t *testing.T) {
		t.Parallel()
		c, err := parseWith(t, "metrics: {listen: \"-\"}\n"+minimal, nil)
		require.NoError(t, err)
		require.Equal(t, MetricsDisabled, c.Metrics.Listen)
	})
}

func TestEnvExpansion(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name  string
		edits []string
		env   env
		check func(t *testing.T, c *Config)
		want  []Problem
	}{
		{
			name:  "Set",
			edits: []string{`token: "admin-token-0123456789"`, `token: "${ADMIN_TOKEN}"`},
			env:   env{"ADMIN_TOKEN": "from-env-token-0123456789"},
			check: func(t *testing.T, c *Config) {
				require.Equal(t, "from-env-token-0123456789", c.Admin.Tokens[0].Token)
			},
		},
		{
			name:  "DefaultUsedWhenUnset",
			edits: []string{"exchange: events", `exchange: "${EXCHANGE:-platform.events}"`},
			check: func(t *testing.T, c *Config) { require.Equal(t, "platform.events", c.Broker.Exchange) },
		},
		{
			name:  "DefaultUsedWhenEmpty",
			edits: []string{"exchange: events", `exchange: "${EXCHANGE:-platform.events}"`},
			env:   env{"EXCHANGE": ""},
			check: func(t *testing.T, c *Config) { require.Equal(t, "platform.events", c.Broker.Exchange) },
		},
		{
			name:  "DefaultIgnoredWhenSet",
			edits: []string{"exchange: events", `exchange: "${EXCHANGE:-platform.events}"`},
			env:   env{"EXCHANGE": "shop"},
			check: func(t *testing.T, c *Config) { require.Equal(t, "shop", c.Broker.Exchange) },
		},
		{
			name:  "InsideAString",
			edits: []string{"postgres://postgres@127.0.0.1:5432/stock", "postgres://${PGUSER:-postgres}:${PGPASSWORD}@${PGHOST}:5432/stock"},
			env:   env{"PGPASSWORD": "s3cret", "PGHOST": "db.internal"},
			check: func(t *testing.T, c *Config) {
				require.Equal(t, "postgres://postgres:s3cret@db.internal:5432/stock", c.Services[0].Database)
			},
		},
		{
			name:  "DollarEscape",
			edits: []string{"dbname=shipping", "dbname=shipping password=pa$$word$$"},
			check: func(t *testing.T, c *Config) {
				require.Equal(t, "host=127.0.0.1 user=postgres dbname=shipping password=pa$word$", c.Services[1].Database)
			},
		},
		{
			name:  "EscapedReferenceIsLiteral",
			edits: []string{"dbname=shipping", "dbname=shipping password=$${NOT_A_VAR}"},
			check: func(t *testing.T, c *Config) {
				require.Equal(t, "host=127.0.0.1 user=postgres dbname=shipping password=${NOT_A_VAR}", c.Services[1].Database)
			},
		},
		{
			name:  "LoneDollarKept",
			edits: []string{"dbname=shipping", "dbname=shipping password=pa$word"},
			check: func(t *testing.T, c *Config) {
				require.Equal(t, "host=127.0.0.1 user=postgres dbname=shipping password=pa$word", c.Services[1].Database)
			},
		},
		{
			name:  "Integer",
			edits: []string{"concurrency: 4", "concurrency: ${STOCK_CONCURRENCY:-8}"},
			env:   env{"STOCK_CONCURRENCY": "16"},
			check: func(t *testing.T, c *Config) { require.Equal(t, 16, c.Services[0].Pools[0].Concurrency) },
		},
		{
			name:  "IntegerDefault",
			edits: []string{"concurrency: 4", "concurrency: ${STOCK_CONCURRENCY:-8}"},
			check: func(t *testing.T, c *Config) { require.Equal(t, 8, c.Services[0].Pools[0].Concurrency) },
		},
		{
			name:  "Duration",
			edits: []string{"horizon: 336h", "horizon: ${STOCK_HORIZON:-72h}"},
			check: func(t *testing.T, c *Config) { require.Equal(t, 72*time.Hour, c.Services[0].Horizon) },
		},
		{
			name:  "ValueCannotInjectYAML",
			edits: []string{"exchange: events", `exchange: "${EXCHANGE}"`},
			env:   env{"EXCHANGE": "x}\nservices: []\nfoo: {bar"},
			check: func(t *testing.T, c *Config) {
				require.Equal(t, "x}\nservices: []\nfoo: {bar", c.Broker.Exchange)
				require.Len(t, c.Services, 2)
			},
		},
		{
			name:  "Unset",
			edits: []string{`token: "admin-token-0123456789"`, `token: "${ADMIN_TOKEN}"`},
			want: []Problem{{
				Path:    "admin.tokens[0].token",
				Message: `environment variable "ADMIN_TOKEN" is not set`,
			}},
		},
		{
			name:  "EveryUnsetVariableReported",
			edits: []string{"postgres://postgres@127.0.0.1:5432/stock", "postgres://${PGUSER}:${PGPASSWORD}@db/stock"},
			want: []Problem{
				{Path: "services[0].database", Message: `environment variable "PGUSER" is not set`},
				{Path: "services[0].database", Message: `environment variable "PGPASSWORD" is not set`},
			},
		},
		{
			name:  "UnsetIntegerNoTypeError",
			edits: []string{"concurrency: 4", "concurrency: ${STOCK_CONCURRENCY}"},
			want: []Problem{{
				Path:    "services[0].pools[0].concurrency",
				Message: `environment variable "STOCK_CONCURRENCY" is not set`,
			}},
		},
		{
			name:  "IntegerNotANumber",
			edits: []string{"concurrency: 4", "concurrency: ${STOCK_CONCURRENCY}"},
			env:   env{"STOCK_CONCURRENCY": "many"},
			want: []Problem{{
				Path:    "services[0].pools[0].concurrency",
				Message: `must be an integer (got "many")`,
			}},
		},
		{
			name:  "Unterminated",
			edits: []string{"exchange: events", `exchange: "${EXCHANGE"`},
			want: []Problem{{
				Path:    "broker.exchange",
				Message: `unterminated variable reference "${EXCHANGE"`,
			}},
		},
		{
			name:  "InvalidName",
			edits: []string{"exchange: events", `exchange: "${1X}"`},
			want: []Problem{{
				Path:    "broker.exchange",
				Message: `invalid variable reference "${1X}" (want ${NAME} or ${NAME:-default})`,
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			data := edit(t, baseYAML, tt.edits...)
			c, err := parseWith(t, data, tt.env)
			if tt.want != nil {
				require.Equal(t, tt.want, requireProblems(t, err))
				return
			}
			require.NoError(t, err)
			tt.check(t, c)
		})
	}
}

// The memory budget of a pool: a prefetch that would hold more bodies of
// broker.max_body_bytes than max_unacked_bytes runs capped, explicit
// values are kept as written, and a body limit the budget cannot hold once
// per worker is refused with the key's path.
func TestMaxUnackedBytes(t *testing.T) {
	t.Parallel()
	pool := func(extra string) string {
		return `services:
  - name: stock
    database: postgres://localhost/stock
    pools:
      - name: stock-events
        queue: stock.events
        bindings: ["order.#"]
        handlers: [stock.reserve]
` + extra
	}

	t.Run("SmallBodiesUncapped", func(t *testing.T) {
		t.Parallel()
		c, err := parseWith(t, "broker: {max_body_bytes: 65536}\n"+pool(""), nil)
		require.NoError(t, err)
		prefetch, capped := c.Services[0].Pools[0].PrefetchFor(c.Broker.MaxBodyBytes)
		require.Equal(t, 8000, prefetch)
		require.False(t, capped)
	})

	t.Run("ExplicitValuesKept", func(t *testing.T) {
		t.Parallel()
		c, err := parseWith(t, pool("        prefetch: 400\n        batch: {size: 100}\n        max_unacked_bytes: 4294967296\n"), nil)
		require.NoError(t, err)
		p := c.Services[0].Pools[0]
		require.Equal(t, 400, p.Prefetch)
		require.Equal(t, 100, p.Batch.Size)
		prefetch, capped := p.PrefetchFor(c.Broker.MaxBodyBytes)
		require.Equal(t, 400, prefetch)
		require.False(t, capped)
	})

	t.Run("ExplicitPrefetchCapped", func(t *testing.T) {
		t.Parallel()
		c, err := parseWith(t, "broker: {max_body_bytes: 16777216}\n"+pool("        prefetch: 4000\n"), nil)
		require.NoError(t, err)
		p := c.Services[0].Pools[0]
		require.Equal(t, 4000, p.Prefetch, "the config keeps what the user wrote")
		prefetch, capped := p.PrefetchFor(c.Broker.MaxBodyBytes)
		require.Equal(t, 64, prefetch, "1 GiB of 16 MiB bodies")
		require.True(t, capped)
	})

	t.Run("BodyLimitTooLargeForTheBudget", func(t *testing.T) {
		t.Parallel()
		_, err := parseWith(t, "broker: {max_body_bytes: 536870912}\n"+pool(""), nil)
		require.Equal(t, []Problem{{
			Path: "services[0].pools[0].max_unacked_bytes",
			Message: "1073741824 bytes hold 2 bodies of broker.max_body_bytes (536870912), fewer than one per worker (concurrency 4): " +
				"raise max_unacked_bytes to at least 2147483648 or lower broker.max_body_bytes",
		}}, requireProblems(t, err))
	})

	t.Run("OutOfRange", func(t *testing.T) {
		t.Parallel()
		_, err := parseWith(t, pool("        max_unacked_bytes: 1000\n"), nil)
		require.Equal(t, []string{"services[0].pools[0].max_unacked_bytes"}, paths(requireProblems(t, err)))
	})
}
