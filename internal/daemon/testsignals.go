package daemon

import (
	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/testsignal"
	"github.com/platformd/platformd/internal/workers"
)

// TestSignals are the daemon's internal events that tests wait for instead
// of sleeping or polling (see internal/testsignal). A test of this package
// hands them to start through Options.testSignals, initialising the ones
// it waits on first; a shipped daemon never initialises them, and each
// then costs a nil check. Every signal fires after the state it reports is
// visible (serviceList, ListServices, ListPools, the metrics).
type TestSignals struct {
	// ServiceUp fires when a service is brought up: migrated, its pools
	// started (value: the service).
	ServiceUp testsignal.Signal[string]
	// ServiceDown fires when a service has stopped (value: the service).
	ServiceDown testsignal.Signal[string]
	// Health fires after every health check of a service's database,
	// once its outcome is reported.
	Health testsignal.Signal[HealthSignal]
	// ReloadApplied fires when a reload was applied in full.
	ReloadApplied testsignal.Signal[admin.ReloadResult]
	// ReloadFailed fires when a reload was refused (nothing changed) or
	// applied in part (value: its error).
	ReloadFailed testsignal.Signal[error]
	// PoolStarted fires when a pool was started, at a service's bring-up
	// or by a reload (value: the pool).
	PoolStarted testsignal.Signal[string]
	// PoolStopped fires when a pool removed or changed by a reload has
	// drained and stopped (value: the pool).
	PoolStopped testsignal.Signal[string]

	// PoolBuiltFunc, when set, sees every pool the daemon builds, before
	// it starts: a test initialises there the pool's own signals
	// (workers.PoolTestSignals) that it waits on. Set before start.
	PoolBuiltFunc func(*workers.Pool)
}

// HealthSignal is a Health value: the service, whether it is up, and its
// database's error (nil when it answered).
type HealthSignal struct {
	Service string
	Up      bool
	Err     error
}
