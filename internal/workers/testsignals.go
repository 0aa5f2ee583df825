package workers

import "github.com/platformd/platformd/internal/testsignal"

// PoolTestSignals are a pool's internal events that tests wait for
// instead of sleeping or polling (see internal/testsignal). Production
// code never initialises them: each costs a nil check. Every signal fires
// after the state it reports is visible through Info.
type PoolTestSignals struct {
	// Connected fires when a consumer channel is open and its workers
	// count as connected (value: the workers connected now).
	Connected testsignal.Signal[int64]
	// ConsumerStarted fires when a consumer (re)starts: after a connect,
	// a reconnect or a resume (value: its consumer tag).
	ConsumerStarted testsignal.Signal[string]
	// Paused fires when a pause is applied, from this daemon or from the
	// stored state (value: its reason).
	Paused testsignal.Signal[string]
	// Quiesced fires when the pool is paused and every worker has
	// cancelled its consumer and settled its batch.
	Quiesced testsignal.Signal[struct{}]
	// Resized fires when a partitioned pool's reader has moved its keys
	// to a new number of workers on its running consumer (value: how
	// many).
	Resized testsignal.Signal[int]
	// Resumed fires when a resume is applied.
	Resumed testsignal.Signal[struct{}]
	// BatchSettled fires whenever settled deliveries are counted in Info:
	// after an ack is sent (value: the deliveries it covered) and after
	// each retry or failure copy is confirmed (value: 1).
	BatchSettled testsignal.Signal[int]
	// DatabaseError fires when the pool's record of its database's last
	// error changes (value: the error, "" once the database answers).
	DatabaseError testsignal.Signal[string]
	// Released fires when an ordered pool sent parked events back to its
	// queue (value: how many).
	Released testsignal.Signal[int]
	// OldRetryDrained fires when the pool has moved what an older
	// version's own delay queues held into the shared delay queues, at
	// start (value: how many messages it moved).
	OldRetryDrained testsignal.Signal[int]
	// DuplicateAgesFlushed fires when the pool's noted duplicate ages were
	// added to platform.duplicate_age.
	DuplicateAgesFlushed testsignal.Signal[struct{}]
}

// TestSignals returns the pool's test signals, for tests only (this
// package's and the daemon's): a test initialises the ones it waits on,
// before the event can happen. Safe for concurrent use.
func (p *Pool) TestSignals() *PoolTestSignals { return &p.testSignals }
