package admin

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/platformd/platformd/internal/failure"
)

// Backend is what the admin server calls to do its work. The daemon
// implements it over the dedup, workers and scheduler packages.
//
// Methods report an unknown service or pool with an error wrapping
// ErrNotFound, a bad argument with ErrInvalidArgument, a horizon under the
// minimum with ErrBelowMinHorizon and a dependency that cannot be reached
// (database, broker) with ErrUnavailable; any other error is answered as an
// internal error without its text. The server validates requests before
// calling the Backend (see the RPCs' documentation in admin.proto), so names
// required by the API are non-empty, ids are valid non-nil UUIDs, limits are
// in 1..ListLimitMax and horizons are positive. actor is the name of the
// caller's token, for the audit trail.
//
// Implementations must be safe for concurrent use.
type Backend interface {
	// LimitsBackend: a pool's live limits and the kill switch (limits.go).
	LimitsBackend
	// DelayQueuesBackend: the shared retry delay queues' depths
	// (delayqueues.go).
	DelayQueuesBackend
	// ListServices returns every hosted service, ordered by name.
	ListServices(ctx context.Context) ([]ServiceInfo, error)
	// ListPools returns the pools of service, or of every service when
	// service is "", ordered by name. An unknown service is ErrNotFound.
	ListPools(ctx context.Context, service string) ([]PoolInfo, error)
	// PausePool pauses pool and returns it. Pausing a paused pool is a
	// no-op. An unknown pool is ErrNotFound.
	PausePool(ctx context.Context, pool, reason, actor string) (PoolInfo, error)
	// ResumePool resumes pool and returns it. Resuming a running pool is a
	// no-op. An unknown pool is ErrNotFound.
	ResumePool(ctx context.Context, pool, actor string) (PoolInfo, error)
	// LookupEvent reports whether id was processed by service, or by every
	// service when service is "", one result per service looked in. An
	// unknown service is ErrNotFound.
	LookupEvent(ctx context.Context, id uuid.UUID, service string) ([]LookupResult, error)
	// GetHorizon returns the horizon in force for service.
	GetHorizon(ctx context.Context, service string) (HorizonInfo, error)
	// SetHorizon sets the horizon of service and returns the result. A
	// horizon under the service's minimum without force is
	// ErrBelowMinHorizon; one under the oldest duplicate age seen in the
	// last 30 days without force wraps ErrFailedPrecondition, naming that
	// age and its source.
	SetHorizon(ctx context.Context, service string, horizon time.Duration, force bool, actor string) (HorizonInfo, error)
	// HorizonAdvisor advises a service's horizon from what it has seen.
	HorizonAdvisor
	// RunPurge purges service now, or only counts with dryRun, and returns
	// the finished run.
	RunPurge(ctx context.Context, service string, dryRun bool, actor string) (PurgeRun, error)
	// ListPurgeRuns returns at most limit purge runs of service, newest
	// first.
	ListPurgeRuns(ctx context.Context, service string, limit int) ([]PurgeRun, error)
	// ListFailedMessages returns at most limit of pool's failures still
	// failed (its failure queue's messages before the failure store),
	// newest first, without changing them.
	ListFailedMessages(ctx context.Context, pool string, limit int) ([]FailedMessage, error)
	// RetryFailedMessages sends the failed messages of pool with the given
	// event ids, or every one when all is set (ids is then empty), back to
	// the pool's queue with the attempt count reset (a server-side retry
	// of the failure store), and returns how many it selected.
	RetryFailedMessages(ctx context.Context, pool string, ids []uuid.UUID, all, overrideBeyondHorizon bool, actor string) (int, error)
	// DescribeService returns what an operator needs beyond ServiceInfo
	// to judge a horizon or a purge: see ServiceDetail.
	DescribeService(ctx context.Context, service string) (ServiceDetail, error)
	// ListAudit returns at most limit audit entries of service, or of every
	// service when service is "", newest first. An unknown service is
	// ErrNotFound; of every service, those whose database is away are
	// listed as unavailable, the others' entries returned.
	ListAudit(ctx context.Context, service string, limit int) (AuditList, error)
	// ReloadConfig reads the config file again and applies the difference
	// (see the RPC's documentation). A config with mistakes is a
	// *ConfigError and changes nothing; a change that needs a restart
	// wraps ErrNeedsRestart.
	ReloadConfig(ctx context.Context, actor string) (ReloadResult, error)
	// ReplayEvents counts (dry run) or starts a replay of a producer's
	// archived events, audited as replay.start (ErrNotFound for an unknown
	// service, pool or pattern; ErrInvalidArgument for a bad selection;
	// ErrFailedPrecondition for a service without archive or a selection
	// matching nothing).
	ReplayEvents(ctx context.Context, req ReplayRequest, actor string) (ReplayInfo, error)
	// GetReplay returns one replay of a producer service.
	GetReplay(ctx context.Context, service string, id uuid.UUID) (ReplayInfo, error)
	// ListReplays returns a producer's newest replays, at most limit.
	ListReplays(ctx context.Context, service string, limit int) ([]ReplayInfo, error)
	// CancelReplay cancels a running replay, audited as replay.cancel.
	CancelReplay(ctx context.Context, service string, id uuid.UUID, actor string) (ReplayInfo, error)

	// The failure workbench (docs/failures.md). service is the filter's
	// service: the server passes the request's, or "" with f.Pool set, and
	// the backend then resolves the pool's service (an unknown pool or
	// service is ErrNotFound). The store's refusals map to ErrNotFound,
	// ErrInvalidArgument and ErrFailedPrecondition, their text kept.

	// ListFailureGroups counts the failures f selects by the keys by (one
	// or more of the failure.Group… constants), largest groups first.
	ListFailureGroups(ctx context.Context, service string, f failure.Filter, by []string) ([]failure.Group, error)
	// ListFailedEvents returns at most limit failures f selects, newest
	// first, and the token of the next page ("" at the end); pageToken is
	// the previous answer's.
	ListFailedEvents(ctx context.Context, service string, f failure.Filter, limit int, pageToken string) ([]FailedEvent, string, error)
	// GetFailedEvent returns one failure, with its edits, looked up by id
	// in every service.
	GetFailedEvent(ctx context.Context, id uuid.UUID) (FailedEvent, error)
	// RetryFailedEvents creates a server-side retry of the failures
	// req.Filter selects, audited as failure.retry; with req.DryRun it
	// only counts them (the answer's ID is then uuid.Nil and its State "").
	RetryFailedEvents(ctx context.Context, service string, req failure.RetryRequest, actor string) (FailureRetry, error)
	// GetFailureRetry returns one retry; service "" looks in every
	// service.
	GetFailureRetry(ctx context.Context, service string, id uuid.UUID) (FailureRetry, error)
	// ListFailureRetries returns the newest retries of service, or of
	// every service when service is "", at most limit, newest first.
	ListFailureRetries(ctx context.Context, service string, limit int) ([]FailureRetry, error)
	// CancelFailureRetry stops a retry that has not finished, audited as
	// failure.retry_cancel; service "" looks in every service.
	CancelFailureRetry(ctx context.Context, service string, id uuid.UUID, actor string) (FailureRetry, error)
	// DiscardFailedEvents marks the unresolved failures f selects
	// discarded, audited as failure.discard, and returns how many; parked
	// says what becomes of the events parked behind a discarded head.
	DiscardFailedEvents(ctx context.Context, service string, f failure.Filter, parked failure.Parked, reason, actor string) (int64, error)
	// EditFailedEvent sets the body a retry of failure id sends (payload,
	// JSON), keeping the original, audited as failure.edit; the failure is
	// looked up in every service.
	EditFailedEvent(ctx context.Context, id uuid.UUID, payload []byte, reason, actor string) (FailedEvent, error)
}

// FailedEvent is one failure of a service's store, with its service's
// name and, where the backend read them (GetFailedEvent, EditFailedEvent),
// its edits, oldest first.
type FailedEvent struct {
	// Service is the name of the service whose database holds it.
	Service string
	failure.Failure
	// Edits are the failure's body edits, oldest first; nil in listings.
	Edits []failure.Edit
}

// FailureRetry is one server-side retry of failures, with its service's
// name.
type FailureRetry struct {
	// Service is the name of the service whose failures it retries.
	Service string
	failure.Retry
}

// Pool states reported in PoolInfo.State.
const (
	PoolStateRunning    = "running"
	PoolStatePaused     = "paused"
	PoolStateConnecting = "connecting"
	PoolStateStopped    = "stopped"
)

// ServiceInfo describes one hosted service.
type ServiceInfo struct {
	// Name is the service's name.
	Name string
	// Horizon is the replay horizon in force.
	Horizon time.Duration
	// MinHorizon is the smallest horizon SetHorizon accepts without force.
	MinHorizon time.Duration
	// LastPurge is when the last purge run finished; zero if never.
	LastPurge time.Time
	// BeyondHorizon is the service's policy for events older than its
	// horizon; may be empty.
	BeyondHorizon string
	// OutboxPending is the number of rows of the service's platform.outbox
	// not yet published; zero without an outbox.
	OutboxPending int64
	// OutboxOldest is the age of the oldest pending outbox row; zero when
	// none is pending.
	OutboxOldest time.Duration
	// Error says why the service's database could not be read; the other
	// figures are then the config's.
	Error string
}

// PoolInfo describes one worker pool.
type PoolInfo struct {
	// Name is the pool's name.
	Name string
	// Service is the name of the pool's service.
	Service string
	// Queue is the queue the pool consumes.
	Queue string
	// State is one of the PoolState… constants; anything else is reported
	// as POOL_STATE_UNSPECIFIED.
	State string
	// PausedReason is the reason given for the pause; empty unless paused.
	PausedReason string
	// Concurrency is the number of workers.
	Concurrency int
	// InFlight is the number of messages being processed.
	InFlight int
	// Processed, Duplicates, Retried and Failed count outcomes since the
	// daemon started.
	Processed, Duplicates, Retried, Failed uint64
	// DuplicatesBySource splits Duplicates by where the copies came from.
	DuplicatesBySource DuplicateCounts
	// Error says why the pool is connecting (its service database's last
	// error); empty otherwise.
	Error string
	// BrokerNode is the broker node (host:port) the pool consumes from;
	// empty while it is not connected.
	BrokerNode string
	// RateLimit is the pool's rate limit (events/s across every daemon
	// running it; 0: none), RateShare this daemon's part of it, and
	// Daemons the daemons that share it.
	RateLimit, RateShare float64
	Daemons              int
}

// DuplicateCounts counts duplicates by source: a broker redelivery, a
// replay (the x-replay header), or else a republish (an outbox relay).
type DuplicateCounts struct {
	Redelivery, Replay, Republish uint64
}

// LookupResult is what one service knows of an event id.
type LookupResult struct {
	// Service is the name of the service looked in.
	Service string
	// Processed is true if the service processed the event.
	Processed bool
	// ProcessedAt is when it was processed; zero unless Processed.
	ProcessedAt time.Time
	// PurgeableAt is when its dedup row becomes purgeable; zero unless
	// Processed.
	PurgeableAt time.Time
}

// HorizonInfo is a service's replay horizon and who set it.
type HorizonInfo struct {
	// Service is the name of the service.
	Service string
	// Horizon is the horizon in force.
	Horizon time.Duration
	// MinHorizon is the smallest horizon accepted without force.
	MinHorizon time.Duration
	// UpdatedAt is when the horizon was last set; zero if the configured
	// default is in force.
	UpdatedAt time.Time
	// UpdatedBy is the actor that last set it; empty if the configured
	// default is in force.
	UpdatedBy string
	// InForce is the horizon the purge and the guard apply: Horizon, or,
	// for a partitioned processed_event, Horizon rounded up to whole
	// partitions; zero means Horizon.
	InForce time.Duration
	// PartitionWidth is the span of one partition of a partitioned
	// processed_event; zero for the plain table.
	PartitionWidth time.Duration
}

// PurgeRun is one purge of a service's processed_event table.
type PurgeRun struct {
	// Service is the name of the purged service.
	Service string
	// Cutoff is the instant before which rows were deleted; zero if unknown.
	Cutoff time.Time
	// StartedAt is when the run started.
	StartedAt time.Time
	// FinishedAt is when it finished; zero while it runs.
	FinishedAt time.Time
	// Deleted is the number of rows deleted, or that would be for a dry
	// run.
	Deleted int64
	// DryRun is true if the run only counted rows.
	DryRun bool
	// Trigger is "schedule" or "admin".
	Trigger string
	// Error is the error that ended the run; empty on success.
	Error string
}

// FailedMessage is one message in a pool's failure queue, read from its
// headers (see docs/contracts.md, "Topology").
type FailedMessage struct {
	// EventID is the event's id; empty if the body could not be decoded.
	EventID string
	// EventName is the event's name.
	EventName string
	// FailureReason is the x-failure-reason header.
	FailureReason string
	// Error is the x-error header.
	Error string
	// Attempt is the x-attempt header.
	Attempt int
	// FailedAt is the x-failed-at header.
	FailedAt time.Time
	// Pool is the x-pool header.
	Pool string
	// RoutingKey is the x-original-routing-key header: the routing key the
	// message was published with.
	RoutingKey string
}

// ReloadResult says what a reload changed; every list is sorted.
type ReloadResult struct {
	ServicesAdded, ServicesRemoved, ServicesRestarted []string
	PoolsAdded, PoolsRemoved, PoolsRestarted          []string
	PoolsUnchanged                                    []string
	// ServicesResized are the services whose database pool was resized
	// in place; PoolsResized the pools whose concurrency or limits
	// changed in place. Neither restarted.
	ServicesResized, PoolsResized []string
}
