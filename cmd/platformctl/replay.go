package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
)

// newReplayCmd returns "platformctl replay" and its subcommands.
func newReplayCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Replay a producer's archived events, or follow and cancel replays",
		Example: `  platformctl replay start order --from 2026-01-02T00:00:00Z --to 2026-01-02T06:00:00Z --dry-run
  platformctl replay start order --event-name 'order.order.#' --from 2026-01-02T00:00:00Z --target-pool stock-events
  platformctl replay get order 0190b2f4-...`,
	}

	var (
		names, ids            []string
		from, to, targetPool  string
		dryRun, includeBeyond bool
		rate                  int32
	)
	start := &cobra.Command{
		Use:   "start SERVICE",
		Short: "Replay archived events of a producer service, or count what a replay would do (--dry-run; admin token)",
		Long: `Replay the archived events of a producer SERVICE (one with outbox.archive)
selected by --from/--to (occurred_at, RFC 3339; from included, to excluded)
or by --event-id, and by --event-name (names or topic patterns; none: all).
Without --target-pool the copies go through the exchange with their own
routing key: every bound pool gets them and skips those it already applied
(counted as duplicates from source replay). With --target-pool they go to
that pool's queue only, leaving out events beyond its service's horizon
unless --include-beyond-horizon.

--dry-run publishes nothing and prints, per target pool, how many copies it
would apply, skip as already processed, or quarantine as beyond its horizon.
The replay itself runs in the daemon, resumes after a restart, and never
publishes one event twice.`,
		Example: "  platformctl replay start order --from 2026-01-02T00:00:00Z --dry-run\n" +
			"  platformctl replay start order --event-id 0190b2f4-7c1e-7b3a-9f1d-2c4e6a8b0d1f --target-pool stock-events",
		Args: cobra.ExactArgs(1),
		RunE: call(a, adminv1.AdminServiceClient.ReplayEvents,
			func(args []string) (*adminv1.ReplayEventsRequest, error) {
				req := &adminv1.ReplayEventsRequest{
					Service: args[0], EventNames: names, EventIds: ids, TargetPool: targetPool, DryRun: dryRun,
					Rate: rate, IncludeBeyondHorizon: includeBeyond,
				}
				for _, f := range []struct {
					name, value string
					dst         **timestamppb.Timestamp
				}{{"from", from, &req.From}, {"to", to, &req.To}} {
					if f.value == "" {
						continue
					}
					t, err := time.Parse(time.RFC3339Nano, f.value)
					if err != nil {
						return nil, invalidf("--%s %q: want RFC 3339 (2026-01-02T15:04:05Z)", f.name, f.value)
					}
					*f.dst = timestamppb.New(t)
				}
				return req, nil
			},
			func(w io.Writer, resp *adminv1.ReplayEventsResponse) { replayTable(w, resp.GetReplay()) }),
	}
	fl := start.Flags()
	fl.StringSliceVar(&names, "event-name", nil, "event name or topic pattern (* one word, # any); repeat or comma-separate; none: all")
	fl.StringSliceVar(&ids, "event-id", nil, "event id to replay; repeat or comma-separate (instead of --from/--to)")
	fl.StringVar(&from, "from", "", "occurred_at lower bound, included (RFC 3339)")
	fl.StringVar(&to, "to", "", "occurred_at upper bound, excluded (RFC 3339)")
	fl.StringVar(&targetPool, "target-pool", "", "send the copies to this pool's queue only")
	fl.BoolVar(&dryRun, "dry-run", false, "publish nothing; print what each target pool would do")
	fl.Int32Var(&rate, "rate", 0, "messages per second (0: the server's default, 500)")
	fl.BoolVar(&includeBeyond, "include-beyond-horizon", false, "with --target-pool, send the events beyond its horizon too, with the override header")

	get := &cobra.Command{
		Use:     "get SERVICE ID",
		Short:   "Show a replay and its progress",
		Example: "  platformctl replay get order 0190b2f4-7c1e-7b3a-9f1d-2c4e6a8b0d1f -o json",
		Args:    cobra.ExactArgs(2),
		RunE: call(a, adminv1.AdminServiceClient.GetReplay,
			func(args []string) (*adminv1.GetReplayRequest, error) {
				return &adminv1.GetReplayRequest{Service: args[0], Id: args[1]}, nil
			},
			func(w io.Writer, resp *adminv1.GetReplayResponse) { replayTable(w, resp.GetReplay()) }),
	}

	list := listCmd(a, &cobra.Command{
		Use:     "list SERVICE",
		Short:   "List a producer's replays, newest first",
		Example: "  platformctl replay list order\n  platformctl replay list order --limit 10 -o json",
	}, "replays", adminv1.AdminServiceClient.ListReplays,
		func(name string, limit int32) *adminv1.ListReplaysRequest {
			return &adminv1.ListReplaysRequest{Service: name, Limit: limit}
		},
		func(w io.Writer, resp *adminv1.ListReplaysResponse) { replaysTable(w, resp.GetReplays()) })

	cancel := &cobra.Command{
		Use:     "cancel SERVICE ID",
		Short:   "Stop a running replay where it is (admin token)",
		Example: "  platformctl replay cancel order 0190b2f4-7c1e-7b3a-9f1d-2c4e6a8b0d1f",
		Args:    cobra.ExactArgs(2),
		RunE: call(a, adminv1.AdminServiceClient.CancelReplay,
			func(args []string) (*adminv1.CancelReplayRequest, error) {
				return &adminv1.CancelReplayRequest{Service: args[0], Id: args[1]}, nil
			},
			func(w io.Writer, resp *adminv1.CancelReplayResponse) { replayTable(w, resp.GetReplay()) }),
	}
	return group(cmd, start, get, list, cancel)
}

// replayTable prints a replay's summary line, then its per-pool table.
func replayTable(w io.Writer, r *adminv1.Replay) {
	row(w, "ID", "SERVICE", "STATE", "MATCHED", "PUBLISHED", "TARGET_POOL", "RATE", "CREATED_AT", "FINISHED_AT", "ERROR")
	replayRow(w, r)
	row(w)
	row(w, "POOL", "SERVICE", "WOULD_APPLY", "ALREADY_PROCESSED", "BEYOND_HORIZON", "PUBLISHED")
	for _, p := range r.GetPools() {
		row(w, p.GetPool(), p.GetService(), fmt.Sprint(p.GetWouldApply()), fmt.Sprint(p.GetAlreadyProcessed()),
			fmt.Sprint(p.GetBeyondHorizon()), fmt.Sprint(p.GetPublished()))
	}
}

func replayRow(w io.Writer, r *adminv1.Replay) {
	row(w, orDash(r.GetId()), r.GetService(), enumWord(r.GetState(), "REPLAY_STATE_"), fmt.Sprint(r.GetMatched()), fmt.Sprint(r.GetPublished()),
		orDash(r.GetTargetPool()), fmt.Sprint(r.GetRate()), formatTime(r.GetCreatedAt()), formatTime(r.GetFinishedAt()), orDash(oneLine(r.GetError())))
}

// replaysTable prints replays, one line each.
func replaysTable(w io.Writer, rs []*adminv1.Replay) {
	row(w, "ID", "SERVICE", "STATE", "MATCHED", "PUBLISHED", "TARGET_POOL", "RATE", "CREATED_AT", "FINISHED_AT", "ERROR")
	for _, r := range rs {
		replayRow(w, r)
	}
}
