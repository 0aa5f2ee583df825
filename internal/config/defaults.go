package config

import (
	"fmt"
	"time"
)

// Defaults applied to absent keys.
const (
	// LogLevelDefault is the default log.level.
	LogLevelDefault = "info"
	// LogFormatDefault is the default log.format.
	LogFormatDefault = "json"
	// AdminListenDefault is the default admin.listen.
	AdminListenDefault = "127.0.0.1:7070"
	// MetricsListenDefault is the default metrics.listen.
	MetricsListenDefault = "127.0.0.1:9464"
	// MetricsDisabled as metrics.listen turns the metrics endpoint off.
	MetricsDisabled = "-"
	// BrokerURLDefault is the default broker.url.
	BrokerURLDefault = "amqp://guest:guest@127.0.0.1:5672/"
	// ExchangeDefault is the default broker.exchange.
	ExchangeDefault = "events"
	// MaxBodyBytesDefault is the default broker.max_body_bytes (1 MiB).
	MaxBodyBytesDefault = 1 << 20
	// MinHorizonDefault is the default service min_horizon.
	MinHorizonDefault = 24 * time.Hour
	// HorizonDefault is the default service horizon (14 days).
	HorizonDefault = 336 * time.Hour
	// BeyondHorizonDefault is the default service beyond_horizon.
	BeyondHorizonDefault = BeyondHorizonQuarantine
	// PurgeEveryDefault is the default purge.every.
	PurgeEveryDefault = 15 * time.Minute
	// FailureRetentionDefault is the default failures.retention (30 days).
	FailureRetentionDefault = 720 * time.Hour
	// PurgeBatchSizeDefault is the default purge.batch_size.
	PurgeBatchSizeDefault = 10000
	// QueueTypeDefault is the default pool queue_type.
	QueueTypeDefault = QueueQuorum
	// ConcurrencyDefault is the default pool concurrency.
	ConcurrencyDefault = 4
	// BatchSizeDefault is the default pool batch.size: a ceiling, not a
	// target (a worker lingers for more only while busy), so a large one
	// costs a lone event at low load nothing and lets a backlog commit in
	// few transactions (docs/performance.md: 100 kept a drain at about
	// 0.54 of a raw consumer, 1000 at about 0.8 on the same machine).
	BatchSizeDefault = 1000
	// BatchWaitDefault is the default pool batch.wait.
	BatchWaitDefault = 5 * time.Millisecond
	// MaxUnackedBytesDefault is the default pool max_unacked_bytes (1 GiB):
	// the most message bodies, counted at broker.max_body_bytes each, that
	// a pool may hold unacknowledged. RabbitMQ bounds a consumer by count
	// only (it does not implement basic.qos prefetch-size), so the prefetch
	// is what bounds the bodies a pool holds: at most
	// max_unacked_bytes / max_body_bytes of them.
	MaxUnackedBytesDefault = 1 << 30
	// PrefetchMax is the largest prefetch count (the AMQP field is 16 bits);
	// the default prefetch, concurrency*batch.size*2, is capped at it.
	PrefetchMax = 65535
)

// RetryDelaysDefault returns the default retry.delays: 1s, 10s, 1m, 10m.
func RetryDelaysDefault() []time.Duration {
	return []time.Duration{time.Second, 10 * time.Second, time.Minute, 10 * time.Minute}
}

// DerivedPrefetch is the prefetch of a pool that sets none: two batches
// per worker, concurrency x batchSize x 2, at most PrefetchMax. Out-of-range
// arguments (reported on their own keys) are clamped so that the product
// cannot overflow.
func DerivedPrefetch(concurrency, batchSize int) int {
	conc := max(1, min(concurrency, concurrencyMax))
	size := max(1, min(batchSize, BatchSizeMax))
	return min(conc*size*2, PrefetchMax)
}

// applyDefaults fills every key that isSet reports absent.
func applyDefaults(c *Config, isSet func(path string) bool) {
	setString := func(path string, dst *string, def string) {
		if !isSet(path) {
			*dst = def
		}
	}
	setInt := func(path string, dst *int, def int) {
		if !isSet(path) {
			*dst = def
		}
	}
	setDuration := func(path string, dst *time.Duration, def time.Duration) {
		if !isSet(path) {
			*dst = def
		}
	}

	setString("log.level", &c.Log.Level, LogLevelDefault)
	setString("log.format", &c.Log.Format, LogFormatDefault)
	setString("admin.listen", &c.Admin.Listen, AdminListenDefault)
	setString("metrics.listen", &c.Metrics.Listen, MetricsListenDefault)
	if !isSet("broker.urls") {
		setString("broker.url", &c.Broker.URL, BrokerURLDefault)
	}
	setString("broker.exchange", &c.Broker.Exchange, ExchangeDefault)
	setInt("broker.max_body_bytes", &c.Broker.MaxBodyBytes, MaxBodyBytesDefault)
	applyTracingDefaults(&c.Tracing, isSet)

	for i := range c.Services {
		s := &c.Services[i]
		sp := servicePath(i)
		setDuration(sp+".min_horizon", &s.MinHorizon, MinHorizonDefault)
		setDuration(sp+".horizon", &s.Horizon, HorizonDefault)
		setString(sp+".beyond_horizon", &s.BeyondHorizon, BeyondHorizonDefault)
		setDuration(sp+".purge.every", &s.Purge.Every, PurgeEveryDefault)
		setDuration(sp+".failures.retention", &s.Failures.Retention, FailureRetentionDefault)
		setInt(sp+".purge.batch_size", &s.Purge.BatchSize, PurgeBatchSizeDefault)
		applyOutboxDefaults(s, sp, isSet)
		for j := range s.Pools {
			p := &s.Pools[j]
			pp := poolPath(i, j)
			setString(pp+".queue_type", &p.QueueType, QueueTypeDefault)
			setInt(pp+".concurrency", &p.Concurrency, ConcurrencyDefault)
			if p.Limits.Concurrency > 0 { // limits.concurrency overrides it (limits.go)
				p.Concurrency = p.Limits.Concurrency
			}
			setInt(pp+".batch.size", &p.Batch.Size, BatchSizeDefault)
			setDuration(pp+".batch.wait", &p.Batch.Wait, BatchWaitDefault)
			setInt(pp+".max_unacked_bytes", &p.MaxUnackedBytes, MaxUnackedBytesDefault)
			if !isSet(pp + ".retry.delays") {
				p.Retry.Delays = RetryDelaysDefault()
			}
			if !isSet(pp + ".prefetch") {
				// Clamped so that out-of-range values (reported on their
				// own keys) cannot overflow the product.
				p.Prefetch = DerivedPrefetch(p.Concurrency, p.Batch.Size)
			}
		}
		applyDatabasePoolDefaults(s, sp, isSet)
	}
}

func servicePath(i int) string { return fmt.Sprintf("services[%d]", i) }

func poolPath(i, j int) string { return fmt.Sprintf("services[%d].pools[%d]", i, j) }
