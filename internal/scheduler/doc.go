// Package scheduler purges each service's processed_event table against
// that service's replay horizon, on a schedule and on demand.
//
// # Jobs
//
// A Scheduler runs one gocron v2 job per service, named "purge:<service>",
// every Service.Every, in singleton mode (a run still going when the
// next is due makes gocron skip that one). The first run comes one period
// after Start, not at Start: a fleet of daemons restarting together does not
// purge all at once, and a daemon crash-looping does not purge at every
// start. When Config.Metrics is set, a second, light job per service
// ("rows:<service>") sets the processed_event row estimate gauge from
// pg_class.reltuples, at Start and then every Config.RowEstimateEvery.
//
// # One purger per service
//
// Every run, scheduled or asked for with RunNow, first takes the service's
// purge lease, the row 'platformd.purge.<service>' of platform.lease (package
// lease), by the database's clock: held for the run, renewed every TTL/3
// (Service.LeaseTTL, default lease.TTLDefault), and released after it.
// Unlike a session advisory lock it holds no connection between its
// statements (they run on the daemon's control session when ControlFunc is
// set), so it works through a transaction-mode pooler. A run that does not
// get the lease is skipped (a debug log) when scheduled, and fails through
// RunNow with a *PurgeInProgressError (errors.Is ErrPurgeInProgress) that
// names the holder and how long its lease lasts unless renewed. If a daemon
// dies mid-run, its lease stays until it expires, and every purge of the
// service is refused until then, on every daemon, the restarted one's
// included (its holder name is new).
//
// The lease is taken inside the job rather than through gocron's
// WithDistributedJobLocker: gocron turns every Lock error into a silent skip
// (a database outage would look like another daemon purging), releases the
// lock with the job's context (already cancelled at shutdown), and does not
// cover RunNow. Taking it inside the one function both paths call gives them
// the same rule and the same errors.
//
// The lease is an optimisation, not the guarantee. gocron's own locker does
// not promise one run per period across instances (upstream issue 841), and
// a holder cut off from the database can lose its lease while a chunk of
// its purge is still running (each chunk checks the lease before it
// starts). The purge itself (dedup.Purge) stays correct when runs overlap: its cutoff is
// computed by the database clock, and each chunk takes its rows FOR UPDATE
// SKIP LOCKED, so overlapping runs share the rows and each row is deleted
// once.
//
// # Each run
//
// A run records itself in platform.purge_run (state.StartPurgeRun, trigger
// "schedule" or "admin", dry runs with dry_run set), reads the horizon in
// force with state.GetHorizon (so a horizon changed through the admin API
// applies at the next run, on every daemon, without a restart), purges
// with dedup.Purge in chunks of BatchSize rows, each under ChunkTimeout,
// resting between chunks at least Pause and twice as long as the chunk took
// (dedup.PurgeDutyDefault: a purge takes at most a third of a database
// backend's time from the consumers), and records the outcome with
// state.FinishPurgeRun, even when the run was cancelled. A stored horizon
// under the service's MinHorizon that was not forced (the floor was raised
// in the configuration after it was stored) is raised to MinHorizon for the
// run: the purge never deletes a row the configuration protects.
//
// Metrics: PurgeRowsDeleted, PurgeDuration, PurgeChunkDuration and
// PurgeLastSuccess, for runs that delete (not dry runs). PurgeLastSuccess
// is per daemon: with several daemons sharing a database, alert on the
// newest value across them. A run is logged at info level only when it
// deleted rows, and a cancelled run is never logged as an error.
//
// # Lifecycle
//
// Scheduler follows River's startstop contract: Start runs the jobs in the
// background and returns; Stop cancels the running purge's context, waits
// for every run (scheduled or RunNow) to end and record itself, shuts gocron
// down, and may be called twice or before Start. Cancelling Start's context
// cancels runs and stops scheduling, as Stop does, but Stop must still be
// called to release gocron's goroutines.
package scheduler
