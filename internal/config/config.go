package config

import (
	"slices"
	"time"
)

// Config is the whole platformd configuration, as Load returns it: defaults
// applied, validated, token files read. It is a plain value, safe for
// concurrent reads.
type Config struct {
	// Log sets the logger.
	Log LogConfig `yaml:"log"`
	// Admin configures the gRPC admin server.
	Admin AdminConfig `yaml:"admin"`
	// Metrics configures the Prometheus endpoint.
	Metrics MetricsConfig `yaml:"metrics"`
	// Console configures the operators' web console (off when absent).
	Console ConsoleConfig `yaml:"console"`
	// Broker configures the RabbitMQ connection.
	Broker BrokerConfig `yaml:"broker"`
	// Services are the consumer services (at least one).
	Services []ServiceConfig `yaml:"services"`
	// Tracing configures OpenTelemetry traces (off by default).
	Tracing TracingConfig `yaml:"tracing"`
	// DatabaseBudget caps the connections to the services' databases
	// across the daemon (off by default).
	DatabaseBudget DatabaseBudgetConfig `yaml:"database_budget"`
}

// LogConfig sets the slog level and format.
type LogConfig struct {
	// Level is debug|info|warn|error (default info).
	Level string `yaml:"level"`
	// Format is json|text (default json).
	Format string `yaml:"format"`
}

// AdminConfig configures the gRPC admin server.
type AdminConfig struct {
	// Listen is the admin address (default 127.0.0.1:7070).
	Listen string `yaml:"listen"`
	// Tokens are the bearer tokens accepted; none means every RPC but
	// health is refused.
	Tokens []TokenConfig `yaml:"tokens"`
	// TLS is optional; ClientCAFile turns on mTLS.
	TLS TLSConfig `yaml:"tls"`
}

// Token roles.
const (
	// RoleRead may call lookups and listings.
	RoleRead = "read"
	// RoleAdmin may call every RPC.
	RoleAdmin = "admin"
)

// TokenConfig is one named bearer token. Exactly one of Token and TokenFile
// is set; Load reads TokenFile into Token.
type TokenConfig struct {
	// Name identifies the token in logs and audit records (unique).
	Name string `yaml:"name"`
	// Role is RoleRead or RoleAdmin.
	Role string `yaml:"role"`
	// Token is the bearer token itself (at least 16 characters, unique).
	Token string `yaml:"token"`
	// TokenFile is a file holding the token, trimmed of surrounding
	// whitespace. A relative path is resolved against the directory of the
	// config file; after Load it holds the resolved path.
	TokenFile string `yaml:"token_file"`
}

// TLSConfig holds optional TLS files for the admin server. Relative paths
// are resolved against the directory of the config file; after Load the
// fields hold the resolved paths.
type TLSConfig struct {
	// CertFile is the PEM server certificate (with KeyFile, or neither).
	CertFile string `yaml:"cert_file"`
	// KeyFile is the PEM private key of CertFile.
	KeyFile string `yaml:"key_file"`
	// ClientCAFile, when set, turns on mTLS: clients must present a
	// certificate signed by one of its PEM CAs.
	ClientCAFile string `yaml:"client_ca_file"`
}

// Enabled reports whether the admin server serves TLS.
func (t TLSConfig) Enabled() bool { return t.CertFile != "" }

// MetricsConfig configures the Prometheus endpoint.
type MetricsConfig struct {
	// Listen is the metrics address (default 127.0.0.1:9464); "-" disables.
	Listen string `yaml:"listen"`
}

// BrokerConfig configures the RabbitMQ connection.
type BrokerConfig struct {
	// URL is the AMQP URL of a single node (default
	// amqp://guest:guest@127.0.0.1:5672/ when URLs is empty too).
	URL string `yaml:"url"`
	// URLs are the AMQP URLs of a cluster's nodes, instead of URL: each
	// connection starts at one chosen at random and moves to the next on
	// loss.
	URLs []string `yaml:"urls"`
	// Exchange is the durable topic exchange (default "events").
	Exchange string `yaml:"exchange"`
	// MaxBodyBytes is the largest body accepted (default 1 MiB, at most
	// 512 MiB).
	MaxBodyBytes int `yaml:"max_body_bytes"`
}

// Addresses returns the broker's node URLs: URLs, or URL alone.
func (b BrokerConfig) Addresses() []string {
	if len(b.URLs) > 0 {
		return b.URLs
	}
	return []string{b.URL}
}

// Beyond-horizon policies.
const (
	// BeyondHorizonQuarantine sends an event older than the horizon to the
	// failure queue (reason beyond_horizon).
	BeyondHorizonQuarantine = "quarantine"
	// BeyondHorizonProcess processes an event older than the horizon anyway.
	BeyondHorizonProcess = "process"
)

// ServiceConfig is one consumer service and its database.
type ServiceConfig struct {
	// Name identifies the service (^[a-z][a-z0-9_-]*$, unique).
	Name string `yaml:"name"`
	// Database is the service's PostgreSQL DSN.
	Database string `yaml:"database"`
	// Horizon is the default replay horizon until one is stored.
	Horizon time.Duration `yaml:"horizon"`
	// MinHorizon is the floor SetHorizon refuses to go under without force.
	MinHorizon time.Duration `yaml:"min_horizon"`
	// BeyondHorizon is quarantine (default) or process.
	BeyondHorizon string `yaml:"beyond_horizon"`
	// Purge schedules the purge of processed_event.
	Purge PurgeConfig `yaml:"purge"`
	// Pools are the service's worker pools (at least one, unless the
	// service is a producer with an outbox block).
	Pools []PoolConfig `yaml:"pools"`
	// Outbox configures the service's outbox relay.
	Outbox OutboxConfig `yaml:"outbox"`
	// Migrations is a folder of goose SQL files (NNN_name.sql) for the
	// service's own tables, applied after the platform's; relative to the
	// config file, resolved by Load. Optional.
	Migrations string `yaml:"migrations"`
	// SQLHandlers are handlers declared as SQL statements (see
	// SQLHandlerConfig); the service's pools reference them by name.
	SQLHandlers []SQLHandlerConfig `yaml:"sql_handlers"`
	// RemoteHandlers are handlers served over HTTP by a process of the
	// service's own, in any language (see RemoteHandlerConfig); the
	// service's pools reference them by name.
	RemoteHandlers []RemoteHandlerConfig `yaml:"remote_handlers"`
	// ProcessedEvent shapes the service's processed_event table (default:
	// the contract's plain table); see processedevent.go.
	ProcessedEvent ProcessedEventConfig `yaml:"processed_event"`
	// DatabasePool sizes the service's database connection pool (default:
	// derived from its pools' concurrency, shrinking to nothing when idle);
	// see databasepool.go.
	DatabasePool DatabasePoolConfig `yaml:"database_pool"`
	// DatabaseMode is DatabaseModeDirect (default) or DatabaseModePooler
	// (database names a transaction-mode pooler such as PgBouncer).
	DatabaseMode string `yaml:"database_mode"`
	// Failures configures the service's failure store.
	Failures ServiceFailuresConfig `yaml:"failures"`
}

// ServiceFailuresConfig configures a service's failure store
// (platform.failed_event).
type ServiceFailuresConfig struct {
	// Retention is how long resolved and discarded failures are kept
	// after their last change before the scheduler deletes them (default
	// FailureRetentionDefault, 720h).
	Retention time.Duration `yaml:"retention"`
}

// PoolFailuresConfig configures how a pool's failures are kept.
type PoolFailuresConfig struct {
	// Ordered keeps each partition_key's events in order across failures:
	// once an event of a key fails (or waits in a retry delay), the key's
	// later events are stored parked until it is resolved, then applied
	// in their order. Needs partition_key. Default false.
	Ordered bool `yaml:"ordered"`
}

// PurgeConfig schedules the processed_event purge.
type PurgeConfig struct {
	// Every is the purge period (default 15m).
	Every time.Duration `yaml:"every"`
	// BatchSize is the rows deleted per chunk (default 10000).
	BatchSize int `yaml:"batch_size"`
}

// Queue types.
const (
	// QueueQuorum is a replicated quorum queue (the default).
	QueueQuorum = "quorum"
	// QueueClassic is a classic queue.
	QueueClassic = "classic"
)

// PoolConfig is one named worker pool on one queue.
type PoolConfig struct {
	// Name identifies the pool in the whole config (^[a-z][a-z0-9_.-]*$);
	// the admin API addresses pools by name alone.
	Name string `yaml:"name"`
	// Queue is the pool's durable queue, unique in the config.
	Queue string `yaml:"queue"`
	// QueueType is QueueQuorum (default) or QueueClassic.
	QueueType string `yaml:"queue_type"`
	// Bindings are the topic binding keys of Queue on the exchange.
	Bindings []string `yaml:"bindings"`
	// Handlers are the registered handler names the pool runs.
	Handlers []string `yaml:"handlers"`
	// Concurrency is the number of workers (default 4).
	Concurrency int `yaml:"concurrency"`
	// Prefetch is the AMQP prefetch count (default
	// concurrency*batch.size*2, capped at 65535). The daemon runs the pool
	// with PrefetchFor's value, which MaxUnackedBytes may lower.
	Prefetch int `yaml:"prefetch"`
	// MaxUnackedBytes bounds the message bodies the pool may hold
	// unacknowledged, each counted at broker.max_body_bytes (default
	// MaxUnackedBytesDefault, 1 GiB): a prefetch that would hold more is
	// capped (see PrefetchFor), and a budget that cannot hold one body per
	// worker is a config error.
	MaxUnackedBytes int `yaml:"max_unacked_bytes"`
	// Batch bounds a worker's batch.
	Batch BatchConfig `yaml:"batch"`
	// Retry lists the retry delays.
	Retry RetryConfig `yaml:"retry"`
	// PartitionKey, a JSON pointer into the payload (RFC 6901, e.g.
	// "/order_id"), gives each key's events to one worker of the pool, in
	// delivery order; a payload without the key goes to any worker. Empty
	// (the default): every worker consumes on its own.
	PartitionKey string `yaml:"partition_key"`
	// Failures configures how the pool's failures are kept (ordered per
	// key or not).
	Failures PoolFailuresConfig `yaml:"failures"`
	// Limits are the pool's default live limits (limits.go); the admin
	// API's SetPoolLimits overrides them at runtime.
	Limits PoolLimitsConfig `yaml:"limits"`
}

// BatchConfig bounds a worker's batch.
type BatchConfig struct {
	// Size is the most deliveries in one batch (default 1000): a ceiling
	// that a batch reaches only while a backlog waits.
	Size int `yaml:"size"`
	// Wait is how long a worker waits to fill a batch (default 5ms, at
	// most 10s; an explicit 0 is kept).
	Wait time.Duration `yaml:"wait"`
}

// RetryConfig lists the retry delays; attempts = len(Delays)+1.
type RetryConfig struct {
	// Delays are the waits before each retry (default [1s, 10s, 1m, 10m]
	// when the key is absent; an explicit empty list means no retry).
	Delays []time.Duration `yaml:"delays"`
}

// PrefetchFor returns the prefetch the pool runs with when bodies may be
// up to maxBodyBytes: Prefetch, lowered to MaxUnackedBytes / maxBodyBytes
// (at least one per worker) when it would hold more bodies than that, and
// whether it was lowered. The worst case of the bodies a pool holds is
// then prefetch x maxBodyBytes <= MaxUnackedBytes.
func (p PoolConfig) PrefetchFor(maxBodyBytes int) (prefetch int, capped bool) {
	if maxBodyBytes <= 0 || p.MaxUnackedBytes <= 0 {
		return p.Prefetch, false
	}
	limit := max(p.MaxUnackedBytes/maxBodyBytes, p.Concurrency, 1)
	if p.Prefetch > limit {
		return limit, true
	}
	return p.Prefetch, false
}

// Attempts is the number of times a message is tried: len(Delays)+1.
func (r RetryConfig) Attempts() int { return len(r.Delays) + 1 }

// RetrySpan is the sum of the pool's retry delays: the longest time a
// message spends in retry before it reaches the failure queue.
func (p PoolConfig) RetrySpan() time.Duration {
	var s time.Duration
	for _, d := range p.Retry.Delays {
		s += d
	}
	return s
}

// Service returns the service called name.
func (c *Config) Service(name string) (ServiceConfig, bool) {
	for _, s := range c.Services {
		if s.Name == name {
			return s, true
		}
	}
	return ServiceConfig{}, false
}

// ServicePath is the key path of service name ("services[2]"), or
// "services" when cfg has no such service.
func (c *Config) ServicePath(name string) string {
	if i := slices.IndexFunc(c.Services, func(s ServiceConfig) bool { return s.Name == name }); i >= 0 {
		return servicePath(i)
	}
	return "services"
}

// Pool returns the pool called name and the service it belongs to. Pool
// names are unique across the whole config.
func (c *Config) Pool(name string) (ServiceConfig, PoolConfig, bool) {
	for _, s := range c.Services {
		for _, p := range s.Pools {
			if p.Name == name {
				return s, p, true
			}
		}
	}
	return ServiceConfig{}, PoolConfig{}, false
}
