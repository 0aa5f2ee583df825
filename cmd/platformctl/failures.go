package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
)

// groupByDefault is what the daemon groups by when --group-by is not
// given (ListFailureGroups' default), for the table's columns.
var groupByDefault = []string{"reason", "fingerprint"}

// whenFlags are the --from and --to of a failure command.
type whenFlags struct {
	from, to string
}

// bind adds --from and --to to fs.
func (w *whenFlags) bind(fs *pflag.FlagSet) {
	fs.StringVar(&w.from, "from", "", `failed_at lower bound, included: RFC 3339, or a duration meaning that long ago ("24h")`)
	fs.StringVar(&w.to, "to", "", `failed_at upper bound, excluded: RFC 3339, or a duration meaning that long ago`)
}

// parse returns the bounds, nil when unset, durations counted back from
// now.
func (w *whenFlags) parse(now time.Time) (from, to *timestamppb.Timestamp, err error) {
	if from, err = parseWhen("from", w.from, now); err != nil {
		return nil, nil, err
	}
	if to, err = parseWhen("to", w.to, now); err != nil {
		return nil, nil, err
	}
	return from, to, nil
}

// parseWhen parses the value of --name: RFC 3339, or a positive Go
// duration meaning that long before now; "" is unset.
func parseWhen(name, value string, now time.Time) (*timestamppb.Timestamp, error) {
	if value == "" {
		return nil, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, value); err == nil {
		return timestamppb.New(t), nil
	}
	d, err := time.ParseDuration(value)
	if err != nil || d <= 0 {
		return nil, invalidf("--%s %q: want RFC 3339 (2026-01-02T15:04:05Z) or a positive duration meaning that long ago (90m, 24h)", name, value)
	}
	return timestamppb.New(now.Add(-d)), nil
}

// filterFlags are the flags of a FailureFilter.
type filterFlags struct {
	when                                                   whenFlags
	service, pool, reason, handler, eventName, fingerprint string
	state, text                                            string
	ids                                                    []string
}

// bind adds the filter's flags to fs.
func (f *filterFlags) bind(fs *pflag.FlagSet) {
	fs.StringVar(&f.service, "service", "", "the service whose failures to select (required unless --pool)")
	fs.StringVar(&f.pool, "pool", "", "select the failures of this pool (and its service)")
	fs.StringVar(&f.reason, "reason", "", "select one reason: decode, no_handler, permanent, retries_exhausted, beyond_horizon, parked, retrying")
	fs.StringVar(&f.handler, "handler", "", "select the failures of this handler")
	fs.StringVar(&f.eventName, "event-name", "", "select the failures of this event name")
	fs.StringVar(&f.fingerprint, "fingerprint", "", "select the failures of this error fingerprint")
	fs.StringVar(&f.state, "state", "", "select one state: failed, parked, retrying, resolved, discarded")
	fs.StringVar(&f.text, "text", "", "select the failures whose error, event name or event id holds this text")
	fs.StringSliceVar(&f.ids, "id", nil, "select this failure id; repeat or comma-separate")
	f.when.bind(fs)
}

// filter returns the FailureFilter the flags say.
func (f *filterFlags) filter(now time.Time) (*adminv1.FailureFilter, error) {
	from, to, err := f.when.parse(now)
	if err != nil {
		return nil, err
	}
	return &adminv1.FailureFilter{
		Service: f.service, Pool: f.pool, Reason: f.reason, Handler: f.handler, EventName: f.eventName,
		Fingerprint: f.fingerprint, From: from, To: to, State: f.state, Text: f.text, Ids: f.ids,
	}, nil
}

// newFailuresCmd returns "platformctl failures" and its subcommands.
func newFailuresCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "failures",
		Short: "The failure workbench: group, list, retry, discard and edit stored failures",
		Long: `Work on the failures a service's database stores (docs/failures.md): a
message that failed its last attempt, or at once, is a row there. A filter
(--service or --pool, then --reason --handler --event-name --fingerprint
--state --text --from --to --id) selects them for list, retry and discard.`,
		Example: `  platformctl failures groups --service stock --state failed
  platformctl failures list --pool stock-events --fingerprint 'stock.reserve: unknown product "?"'
  platformctl failures retry --pool stock-events --reason retries_exhausted --canary 5 --dry-run
  platformctl failures retries`,
	}
	return group(cmd, newFailureGroupsCmd(a), newFailureListCmd(a), newFailureGetCmd(a), newFailureRetryCmd(a),
		newFailureDiscardCmd(a), newFailureEditCmd(a), newFailureRetriesCmd(a))
}

// newFailureGroupsCmd returns "platformctl failures groups".
func newFailureGroupsCmd(a *app) *cobra.Command {
	var (
		service, pool, state string
		when                 whenFlags
		by                   []string
	)
	cmd := &cobra.Command{
		Use:   "groups",
		Short: "Count a service's failures by reason, handler, event name, fingerprint or pool",
		Example: "  platformctl failures groups --service stock\n" +
			"  platformctl failures groups --pool stock-events --group-by handler,fingerprint --from 24h",
		Args: cobra.NoArgs,
	}
	cmd.RunE = call(a, adminv1.AdminServiceClient.ListFailureGroups,
		func([]string) (*adminv1.ListFailureGroupsRequest, error) {
			from, to, err := when.parse(time.Now())
			if err != nil {
				return nil, err
			}
			return &adminv1.ListFailureGroupsRequest{Service: service, Pool: pool, From: from, To: to, State: state, GroupBy: by}, nil
		},
		func(w io.Writer, resp *adminv1.ListFailureGroupsResponse) {
			failureGroupsTable(w, orDefault(by, groupByDefault), resp.GetGroups())
		})
	fs := cmd.Flags()
	fs.StringVar(&service, "service", "", "the service (required unless --pool)")
	fs.StringVar(&pool, "pool", "", "count the failures of this pool only")
	fs.StringVar(&state, "state", "", "count the failures in one state: failed, parked, retrying, resolved, discarded")
	fs.StringSliceVar(&by, "group-by", nil, "keys to group by: reason, handler, event_name, fingerprint, pool; repeat or comma-separate (default reason,fingerprint)")
	when.bind(fs)
	return cmd
}

// orDefault returns s, or def when s is empty.
func orDefault(s, def []string) []string {
	if len(s) == 0 {
		return def
	}
	return s
}

// newFailureListCmd returns "platformctl failures list".
func newFailureListCmd(a *app) *cobra.Command {
	var (
		f         filterFlags
		limit     int32
		pageToken string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the failures a filter selects, newest first",
		Example: "  platformctl failures list --service stock --state failed\n" +
			"  platformctl failures list --pool stock-events --text p-1 --limit 20 -o json",
		Args: cobra.NoArgs,
	}
	cmd.RunE = call(a, adminv1.AdminServiceClient.ListFailedEvents,
		func([]string) (*adminv1.ListFailedEventsRequest, error) {
			filter, err := f.filter(time.Now())
			if err != nil {
				return nil, err
			}
			return &adminv1.ListFailedEventsRequest{Filter: filter, Limit: limit, PageToken: pageToken}, nil
		},
		func(w io.Writer, resp *adminv1.ListFailedEventsResponse) {
			failuresTable(w, resp.GetFailures())
			if next := resp.GetNextPageToken(); next != "" {
				row(w)
				row(w, "NEXT_PAGE_TOKEN", next)
			}
		})
	f.bind(cmd.Flags())
	cmd.Flags().Int32Var(&limit, "limit", 0, "at most this many failures, up to 10000 (0: the server's default, 100)")
	cmd.Flags().StringVar(&pageToken, "page-token", "", "the NEXT_PAGE_TOKEN of the previous page")
	return cmd
}

// newFailureGetCmd returns "platformctl failures get".
func newFailureGetCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "get ID",
		Short:   "Show one failure (looked up in every service) with its body and edits",
		Example: "  platformctl failures get 01900000-0000-7000-8000-000000000001 -o json",
		Args:    cobra.ExactArgs(1),
		RunE: call(a, adminv1.AdminServiceClient.GetFailedEvent,
			func(args []string) (*adminv1.GetFailedEventRequest, error) {
				return &adminv1.GetFailedEventRequest{Id: args[0]}, nil
			},
			func(w io.Writer, resp *adminv1.GetFailedEventResponse) {
				failureTable(w, resp.GetFailure(), resp.GetEdits())
			}),
	}
}

// newFailureRetryCmd returns "platformctl failures retry".
func newFailureRetryCmd(a *app) *cobra.Command {
	var (
		f                      filterFlags
		canary, rate           int32
		dryRun, overrideBeyond bool
	)
	cmd := &cobra.Command{
		Use:   "retry",
		Short: "Send the failures a filter selects back to their pool, a canary first (admin token)",
		Long: `Create a server-side retry of the failures a filter selects: the selection is
frozen now, --canary of them are sent first and the rest follows only if none
of those failed again, at --rate copies per second. The daemon runs it, and
resumes it after a restart; follow it with "failures retries get ID".
--dry-run counts the selection and changes nothing.`,
		Example: "  platformctl failures retry --pool stock-events --reason retries_exhausted --dry-run\n" +
			"  platformctl failures retry --service stock --fingerprint 'stock.reserve: unknown product \"?\"' --canary 5 --rate 50",
		Args: cobra.NoArgs,
	}
	cmd.RunE = call(a, adminv1.AdminServiceClient.RetryFailedEvents,
		func([]string) (*adminv1.RetryFailedEventsRequest, error) {
			filter, err := f.filter(time.Now())
			if err != nil {
				return nil, err
			}
			return &adminv1.RetryFailedEventsRequest{
				Filter: filter, Canary: canary, Rate: rate, DryRun: dryRun, OverrideBeyondHorizon: overrideBeyond,
			}, nil
		},
		func(w io.Writer, resp *adminv1.RetryFailedEventsResponse) {
			failureRetriesTable(w, []*adminv1.FailureRetry{resp.GetRetry()})
		})
	f.bind(cmd.Flags())
	fs := cmd.Flags()
	fs.Int32Var(&canary, "canary", 0, "send this many first, and the rest only if none of them failed again (0: no canary)")
	fs.Int32Var(&rate, "rate", 0, "copies per second (0: the server's default, 200)")
	fs.BoolVar(&dryRun, "dry-run", false, "count the selection; send nothing")
	fs.BoolVar(&overrideBeyond, "override-beyond-horizon", false, "let beyond_horizon failures through the guard")
	return cmd
}

// discardParkedChoices are the values of discard --parked.
var discardParkedChoices = map[string]adminv1.DiscardParked{
	"":        adminv1.DiscardParked_DISCARD_PARKED_UNSPECIFIED,
	"release": adminv1.DiscardParked_DISCARD_PARKED_RELEASE,
	"discard": adminv1.DiscardParked_DISCARD_PARKED_DISCARD,
}

// newFailureDiscardCmd returns "platformctl failures discard".
func newFailureDiscardCmd(a *app) *cobra.Command {
	var (
		f              filterFlags
		reason, parked string
	)
	cmd := &cobra.Command{
		Use:   "discard",
		Short: "Give up the unresolved failures a filter selects (admin token)",
		Long: `Mark the unresolved failures a filter selects discarded. In a pool with ordered
failures, a discarded head with events parked behind it needs --parked:
release applies them in their order, discard gives them up too.`,
		Example: "  platformctl failures discard --pool stock-events --reason decode --why 'garbage from a test producer'\n" +
			"  platformctl failures discard --service stock --id 01900000-0000-7000-8000-000000000003 --parked release",
		Args: cobra.NoArgs,
	}
	cmd.RunE = call(a, adminv1.AdminServiceClient.DiscardFailedEvents,
		func([]string) (*adminv1.DiscardFailedEventsRequest, error) {
			p, ok := discardParkedChoices[parked]
			if !ok {
				return nil, usagef("--parked %q: want release or discard", parked)
			}
			filter, err := f.filter(time.Now())
			if err != nil {
				return nil, err
			}
			return &adminv1.DiscardFailedEventsRequest{Filter: filter, Reason: reason, Parked: p}, nil
		},
		func(w io.Writer, resp *adminv1.DiscardFailedEventsResponse) {
			row(w, "DISCARDED")
			row(w, strconv.FormatInt(resp.GetDiscarded(), 10))
		})
	f.bind(cmd.Flags())
	// --reason is the filter's (a failure's reason); why the operator
	// discards is --why.
	cmd.Flags().StringVar(&reason, "why", "", "why they are discarded, for the audit trail")
	cmd.Flags().StringVar(&parked, "parked", "", "what becomes of events parked behind a discarded head: release or discard")
	return cmd
}

// newFailureEditCmd returns "platformctl failures edit".
func newFailureEditCmd(a *app) *cobra.Command {
	var payload, reason string
	cmd := &cobra.Command{
		Use:   "edit ID --payload JSON|@FILE",
		Short: "Set the body a retry of one failure sends, keeping the original (admin token)",
		Example: "  platformctl failures edit 01900000-0000-7000-8000-000000000001 --payload @fixed.json --reason 'typo in the product id'\n" +
			`  platformctl failures edit 01900000-0000-7000-8000-000000000001 --payload '{"id":"...","payload":{}}'`,
		Args: cobra.ExactArgs(1),
	}
	cmd.RunE = call(a, adminv1.AdminServiceClient.EditFailedEvent,
		func(args []string) (*adminv1.EditFailedEventRequest, error) {
			body, err := readPayload(payload)
			if err != nil {
				return nil, err
			}
			return &adminv1.EditFailedEventRequest{Id: args[0], Payload: body, Reason: reason}, nil
		},
		func(w io.Writer, resp *adminv1.EditFailedEventResponse) {
			failureTable(w, resp.GetFailure(), resp.GetEdits())
		})
	cmd.Flags().StringVar(&payload, "payload", "", "the new body as JSON text, or @FILE to read it from FILE (- for stdin is not supported)")
	cmd.Flags().StringVar(&reason, "reason", "", "why it is edited, for the audit trail")
	return cmd
}

// readPayload returns the --payload value: the text given, or the
// content of the file an @ names.
func readPayload(v string) (string, error) {
	switch {
	case v == "":
		return "", usagef("--payload is required (JSON text or @FILE)")
	case strings.HasPrefix(v, "@"):
		b, err := os.ReadFile(v[1:])
		if err != nil {
			return "", fmt.Errorf("error reading --payload file: %w", err)
		}
		return string(b), nil
	}
	return v, nil
}

// newFailureRetriesCmd returns "platformctl failures retries": the list,
// and its get and cancel.
func newFailureRetriesCmd(a *app) *cobra.Command {
	var (
		service string
		limit   int32
	)
	cmd := &cobra.Command{
		Use:   "retries",
		Short: "List server-side retries of failures, newest first; get or cancel one",
		Example: "  platformctl failures retries --service stock\n" +
			"  platformctl failures retries get 0190bbbb-0000-7000-8000-000000000001\n" +
			"  platformctl failures retries cancel 0190bbbb-0000-7000-8000-000000000002",
		Args: cobra.NoArgs,
	}
	cmd.RunE = call(a, adminv1.AdminServiceClient.ListFailureRetries,
		func([]string) (*adminv1.ListFailureRetriesRequest, error) {
			return &adminv1.ListFailureRetriesRequest{Service: service, Limit: limit}, nil
		},
		func(w io.Writer, resp *adminv1.ListFailureRetriesResponse) { failureRetriesTable(w, resp.GetRetries()) })
	cmd.Flags().StringVar(&service, "service", "", "the service (default: every service)")
	cmd.Flags().Int32Var(&limit, "limit", 0, "at most this many retries, up to 10000 (0: the server's default, 100)")

	var getService, cancelService string
	get := &cobra.Command{
		Use:     "get ID",
		Short:   "Show one retry and its counts",
		Example: "  platformctl failures retries get 0190bbbb-0000-7000-8000-000000000001 -o json",
		Args:    cobra.ExactArgs(1),
		RunE: call(a, adminv1.AdminServiceClient.GetFailureRetry,
			func(args []string) (*adminv1.GetFailureRetryRequest, error) {
				return &adminv1.GetFailureRetryRequest{Service: getService, Id: args[0]}, nil
			},
			func(w io.Writer, resp *adminv1.GetFailureRetryResponse) {
				failureRetriesTable(w, []*adminv1.FailureRetry{resp.GetRetry()})
			}),
	}
	get.Flags().StringVar(&getService, "service", "", "the retry's service (default: looked up in every service)")
	cancel := &cobra.Command{
		Use:     "cancel ID",
		Short:   "Stop a retry that has not finished; copies sent stay sent (admin token)",
		Example: "  platformctl failures retries cancel 0190bbbb-0000-7000-8000-000000000002",
		Args:    cobra.ExactArgs(1),
		RunE: call(a, adminv1.AdminServiceClient.CancelFailureRetry,
			func(args []string) (*adminv1.CancelFailureRetryRequest, error) {
				return &adminv1.CancelFailureRetryRequest{Service: cancelService, Id: args[0]}, nil
			},
			func(w io.Writer, resp *adminv1.CancelFailureRetryResponse) {
				failureRetriesTable(w, []*adminv1.FailureRetry{resp.GetRetry()})
			}),
	}
	cancel.Flags().StringVar(&cancelService, "service", "", "the retry's service (default: looked up in every service)")
	cmd.AddCommand(get, cancel)
	return cmd
}

// failureGroupsTable prints groups, their key's values last (a
// fingerprint holds spaces), in the order of by.
func failureGroupsTable(w io.Writer, by []string, groups []*adminv1.FailureGroup) {
	header := []string{"COUNT", "FIRST_FAILED_AT", "LAST_FAILED_AT", "EXAMPLE_ID"}
	for _, k := range by {
		header = append(header, strings.ToUpper(k))
	}
	row(w, header...)
	for _, g := range groups {
		cells := []string{strconv.FormatInt(g.GetCount(), 10), formatTime(g.GetFirstFailedAt()), formatTime(g.GetLastFailedAt()), orDash(g.GetExampleId())}
		for _, k := range by {
			cells = append(cells, oneLine(g.GetKey()[k]))
		}
		row(w, cells...)
	}
}

// failuresTable prints failures, one line each, the error last.
func failuresTable(w io.Writer, fs []*adminv1.FailedEvent) {
	row(w, "ID", "SERVICE", "POOL", "STATE", "REASON", "EVENT_NAME", "ATTEMPT", "COPIES", "FAILED_AT", "ERROR")
	for _, f := range fs {
		row(w, f.GetId(), f.GetService(), f.GetPool(), f.GetState(), f.GetReason(), orDash(f.GetEventName()),
			strconv.Itoa(int(f.GetAttempt())), strconv.Itoa(int(f.GetCopies())), formatTime(f.GetFailedAt()), oneLine(f.GetError()))
	}
}

// failureTable prints one failure as FIELD VALUE lines, then its edits.
func failureTable(w io.Writer, f *adminv1.FailedEvent, edits []*adminv1.FailedEventEdit) {
	headers := "-"
	if len(f.GetHeaders().GetFields()) > 0 {
		if b, err := json.Marshal(f.GetHeaders().AsMap()); err == nil {
			headers = string(b)
		}
	}
	row(w, "FIELD", "VALUE")
	for _, kv := range [][2]string{
		{"id", f.GetId()}, {"service", f.GetService()}, {"pool", f.GetPool()}, {"event_id", orDash(f.GetEventId())},
		{"event_name", orDash(f.GetEventName())}, {"routing_key", orDash(f.GetRoutingKey())}, {"state", f.GetState()},
		{"reason", f.GetReason()}, {"handler", orDash(f.GetHandler())}, {"attempt", strconv.Itoa(int(f.GetAttempt()))},
		{"copies", strconv.Itoa(int(f.GetCopies()))}, {"first_failed_at", formatTime(f.GetFirstFailedAt())},
		{"failed_at", formatTime(f.GetFailedAt())}, {"sequence_key", orDash(f.GetSequenceKey())},
		{"resolved_at", formatTime(f.GetResolvedAt())}, {"resolved_by", orDash(f.GetResolvedBy())},
		{"edited_at", formatTime(f.GetEditedAt())}, {"edited_by", orDash(f.GetEditedBy())},
		{"retry_id", orDash(f.GetRetryId())}, {"updated_at", formatTime(f.GetUpdatedAt())},
		{"error", oneLine(f.GetError())}, {"fingerprint", oneLine(f.GetFingerprint())}, {"headers", headers},
		{"body", bodyText(f.GetBody())}, {"edited_body", bodyText(f.GetEditedBody())},
	} {
		row(w, kv[0], kv[1])
	}
	if len(edits) == 0 {
		return
	}
	row(w)
	row(w, "EDITED_AT", "EDITED_BY", "REASON", "DIFF")
	for _, e := range edits {
		row(w, formatTime(e.GetEditedAt()), orDash(e.GetEditedBy()), oneLine(e.GetReason()), oneLine(e.GetDiff()))
	}
}

// bodyText shows a body on one line: as text when it is UTF-8, else as
// base64 with a "base64:" prefix; "-" when empty.
func bodyText(b []byte) string {
	switch {
	case len(b) == 0:
		return "-"
	case utf8.Valid(b) && !slices.Contains(b, 0):
		return oneLine(string(b))
	}
	return "base64:" + base64.StdEncoding.EncodeToString(b)
}

// failureRetriesTable prints retries, one line each.
func failureRetriesTable(w io.Writer, rs []*adminv1.FailureRetry) {
	row(w, "ID", "SERVICE", "STATE", "SELECTED", "SENT", "RESOLVED", "FAILED_AGAIN", "CANARY", "RATE", "CREATED_BY", "CREATED_AT", "FINISHED_AT", "ERROR")
	for _, r := range rs {
		state := enumWord(r.GetState(), "FAILURE_RETRY_STATE_")
		if r.GetState() == adminv1.FailureRetryState_FAILURE_RETRY_STATE_UNSPECIFIED && r.GetId() == "" {
			state = "dry_run"
		}
		row(w, orDash(r.GetId()), r.GetService(), state, strconv.FormatInt(r.GetSelected(), 10), strconv.FormatInt(r.GetSent(), 10),
			strconv.FormatInt(r.GetResolved(), 10), strconv.FormatInt(r.GetFailedAgain(), 10), strconv.Itoa(int(r.GetCanary())),
			strconv.Itoa(int(r.GetRate())), orDash(r.GetCreatedBy()), formatTime(r.GetCreatedAt()), formatTime(r.GetFinishedAt()),
			oneLine(r.GetError()))
	}
}
