package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
)

// row writes one tab-separated table row.
func row(w io.Writer, cells ...string) {
	fmt.Fprintln(w, strings.Join(cells, "\t"))
}

// formatTime formats ts in RFC 3339, UTC, or unset as "-".
func formatTime(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}

// formatDuration formats d in Go syntax, or unset as "-".
func formatDuration(d *durationpb.Duration) string {
	if d == nil {
		return "-"
	}
	return d.AsDuration().String()
}

// orDash returns s, or "-" if it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// enumWord formats an enum value of the API as a lower-case word without
// the enum's prefix (POOL_STATE_RUNNING: running, REPLAY_STATE_DONE:
// done); a value without the prefix stays as it is.
func enumWord(v fmt.Stringer, prefix string) string {
	name, ok := strings.CutPrefix(v.String(), prefix)
	if !ok {
		return v.String()
	}
	return strings.ToLower(name)
}

// servicesTable prints services.
func servicesTable(w io.Writer, services []*adminv1.Service) {
	row(w, "NAME", "HORIZON", "MIN_HORIZON", "LAST_PURGE", "BEYOND_HORIZON", "OUTBOX_PENDING", "OUTBOX_OLDEST")
	for _, s := range services {
		lastPurge := "never"
		if s.GetLastPurge() != nil {
			lastPurge = formatTime(s.GetLastPurge())
		}
		oldest := "-"
		if s.GetOutboxPending() > 0 {
			oldest = s.GetOutboxOldest().AsDuration().Round(time.Millisecond).String()
		}
		row(w, s.GetName(), formatDuration(s.GetHorizon()), formatDuration(s.GetMinHorizon()), lastPurge, orDash(s.GetBeyondHorizon()),
			strconv.FormatInt(s.GetOutboxPending(), 10), oldest)
	}
}

// poolsTable prints pools.
func poolsTable(w io.Writer, pools []*adminv1.Pool) {
	row(w, "NAME", "SERVICE", "QUEUE", "STATE", "NODE", "CONCURRENCY", "RATE", "DAEMONS", "IN_FLIGHT", "PROCESSED", "DUPLICATES", "RETRIED", "FAILED", "PAUSED_REASON")
	for _, p := range pools {
		rate := "-"
		if p.GetRateLimit() > 0 {
			rate = strconv.FormatFloat(p.GetRateLimit(), 'f', -1, 64) + "/s"
		}
		row(w, p.GetName(), p.GetService(), p.GetQueue(), enumWord(p.GetState(), "POOL_STATE_"), orDash(p.GetBrokerNode()),
			strconv.Itoa(int(p.GetConcurrency())), rate, strconv.Itoa(int(p.GetDaemons())), strconv.Itoa(int(p.GetInFlight())),
			strconv.FormatUint(p.GetProcessed(), 10), strconv.FormatUint(p.GetDuplicates(), 10),
			strconv.FormatUint(p.GetRetried(), 10), strconv.FormatUint(p.GetFailed(), 10),
			oneLine(p.GetPausedReason()))
	}
}

// delayQueuesTable prints the shared retry delay queues.
func delayQueuesTable(w io.Writer, queues []*adminv1.DelayQueue) {
	row(w, "NAME", "DELAY", "MESSAGES", "POOLS", "ERROR")
	for _, q := range queues {
		messages := strconv.FormatInt(q.GetMessages(), 10)
		if q.GetError() != "" {
			messages = "-"
		}
		row(w, q.GetName(), formatDuration(q.GetDelay()), messages, orDash(strings.Join(q.GetPools(), ",")), orDash(oneLine(q.GetError())))
	}
}

// lookupTable prints lookup results.
func lookupTable(w io.Writer, results []*adminv1.LookupResult) {
	row(w, "SERVICE", "PROCESSED", "PROCESSED_AT", "PURGEABLE_AT")
	for _, r := range results {
		row(w, r.GetService(), strconv.FormatBool(r.GetProcessed()), formatTime(r.GetProcessedAt()), formatTime(r.GetPurgeableAt()))
	}
}

// horizonTable prints a horizon.
func horizonTable(w io.Writer, h *adminv1.Horizon) {
	row(w, "SERVICE", "HORIZON", "MIN_HORIZON", "UPDATED_AT", "UPDATED_BY")
	row(w, h.GetService(), formatDuration(h.GetHorizon()), formatDuration(h.GetMinHorizon()), formatTime(h.GetUpdatedAt()), orDash(h.GetUpdatedBy()))
}

// purgeRunsTable prints purge runs.
func purgeRunsTable(w io.Writer, runs []*adminv1.PurgeRun) {
	row(w, "SERVICE", "TRIGGER", "DRY_RUN", "CUTOFF", "DELETED", "STARTED_AT", "FINISHED_AT", "ERROR")
	for _, r := range runs {
		row(w, r.GetService(), orDash(r.GetTrigger()), strconv.FormatBool(r.GetDryRun()), formatTime(r.GetCutoff()),
			strconv.FormatInt(r.GetDeleted(), 10), formatTime(r.GetStartedAt()), formatTime(r.GetFinishedAt()), orDash(r.GetError()))
	}
}

// failedTable prints failed messages. The error text comes last: it is the
// longest and may hold spaces.
func failedTable(w io.Writer, msgs []*adminv1.FailedMessage) {
	row(w, "EVENT_ID", "EVENT_NAME", "REASON", "ATTEMPT", "FAILED_AT", "ERROR")
	for _, m := range msgs {
		row(w, orDash(m.GetEventId()), orDash(m.GetEventName()), m.GetFailureReason(),
			strconv.Itoa(int(m.GetAttempt())), formatTime(m.GetFailedAt()), oneLine(m.GetError()))
	}
}

// oneLine replaces the line breaks and tabs of s, which would break a table.
func oneLine(s string) string {
	return orDash(strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ", "\t", " ").Replace(s))
}
