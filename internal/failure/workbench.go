package failure

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/internal/dbutil"
	"github.com/platformd/platformd/internal/state"
)

// The workbench: what operators do with a service's failures. The admin
// API and the console reach it through the daemon.

// Errors of the workbench, wrapped with the field or the row they are
// about. The daemon maps them to the admin API's codes.
var (
	// ErrNotFound: no failure or retry with that id in this service.
	ErrNotFound = errors.New("failure: not found")
	// ErrInvalid: a malformed request (a bad filter, an edit that is not
	// JSON or changes the event id); the error names the field.
	ErrInvalid = errors.New("failure: invalid")
	// ErrPrecondition: the rows' state refuses it (a retry of a resolved
	// failure, a filter matching nothing, a discard of a head with parked
	// events and no choice said, a cancel of a finished retry).
	ErrPrecondition = errors.New("failure: failed precondition")
)

// Filter selects failures of one service. Every field set narrows the
// selection; the zero Filter selects every failure.
type Filter struct {
	Pool, Reason, Handler, EventName, Fingerprint string
	// State is one of the State… constants ("" : any).
	State string
	// From and To bound failed_at (From inclusive, To exclusive; zero:
	// open).
	From, To time.Time
	// Text matches the error, the event name or the event id as a
	// substring, case-insensitive.
	Text string
	// IDs, when set, keeps only those failures.
	IDs []uuid.UUID
}

// Group-by keys of Groups.
const (
	GroupReason      = "reason"
	GroupHandler     = "handler"
	GroupEventName   = "event_name"
	GroupFingerprint = "fingerprint"
	GroupPool        = "pool"
)

// Group is one group of Groups: the values of its keys and its failures'
// count and time range.
type Group struct {
	// Key holds the group-by keys' values, by key name.
	Key                         map[string]string
	Count                       int64
	FirstFailedAt, LastFailedAt time.Time
	// ExampleID is one failure of the group.
	ExampleID uuid.UUID
}

// Edit is one edit of a failure's body.
type Edit struct {
	ID                    int64
	EditedAt              time.Time
	EditedBy, Reason      string
	BodyBefore, BodyAfter []byte
	// Diff is the JSON Patch (RFC 6902) from BodyBefore to BodyAfter.
	Diff []byte
}

// Parked says what a discard does with the events parked behind a head it
// discards.
type Parked uint8

// The choices of Parked.
const (
	// ParkedUnspecified: refused with ErrPrecondition when the discard
	// would leave parked events behind a discarded head.
	ParkedUnspecified Parked = iota
	// ParkedRelease: the parked events are applied in their order.
	ParkedRelease
	// ParkedDiscard: the parked events are discarded with their head.
	ParkedDiscard
)

// Retry states (platform.failure_retry.state).
const (
	RetryCanary       = "canary"
	RetryRunning      = "running"
	RetryDone         = "done"
	RetryCanaryFailed = "canary_failed"
	RetryCancelled    = "cancelled"
)

// Defaults of RetryRequest.
const (
	RetryRateDefault = 200
)

// RetryRequest asks for a server-side retry of the failures a filter
// selects.
type RetryRequest struct {
	Filter Filter
	// Canary is how many failures are sent first; the rest waits for their
	// outcome and is not sent if any failed again (0: no canary).
	Canary int
	// Rate is the most copies sent per second (default RetryRateDefault).
	Rate int
	// DryRun counts the selection and stores nothing.
	DryRun bool
	// OverrideBeyondHorizon sends the copies with
	// x-beyond-horizon-override: true, letting beyond_horizon failures
	// through the guard (the operator's deliberate choice).
	OverrideBeyondHorizon bool
}

// Retry is one server-side retry.
type Retry struct {
	ID     uuid.UUID
	State  string
	Filter Filter
	Canary int
	Rate   int
	// OverrideBeyondHorizon is the request's.
	OverrideBeyondHorizon bool
	// Selected is the size of the frozen selection; Sent how many copies
	// went out; Resolved how many of the selection are resolved since;
	// FailedAgain how many failed again after their copy was sent.
	Selected, Sent, Resolved, FailedAgain int64
	Error                                 string
	CreatedBy                             string
	CreatedAt, UpdatedAt, FinishedAt      time.Time
	CancelledBy                           string
}

// Limits of List.
const (
	// ListLimitDefault is List's page size when limit is not positive.
	ListLimitDefault = 100
	// ListLimitMax is the largest page List returns.
	ListLimitMax = 1000
)

// Groups counts the failures f selects by the keys by (Group… constants;
// GroupReason when empty), largest groups first, each with its first and
// last failed_at and one example failure (any one of it). It is one
// aggregate over the filter's rows, a parallel scan of the table when the
// filter narrows nothing: 0.6-0.8 s on average for a million rows on two
// cores (BenchmarkGroupsMillion). Safe for concurrent use.
func (s *Store) Groups(ctx context.Context, f Filter, by []string) ([]Group, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	by, err := validateGroupBy(by)
	if err != nil {
		return nil, err
	}
	cols := make([]string, len(by))
	for i, k := range by {
		cols[i] = groupColumns[k]
	}
	w := newWhere().filter(&f)
	raw, err := groups.One(ctx, s.db, built{SQL: groupsSQL(cols, w), Args: w.args})
	if err != nil {
		return nil, fmt.Errorf("failure: groups: %w", err)
	}
	var rows []struct {
		K     []string  `json:"k"`
		N     int64     `json:"n"`
		First time.Time `json:"first"`
		Last  time.Time `json:"last"`
		Ex    uuid.UUID `json:"ex"`
	}
	if err := json.Unmarshal(raw, &rows); err != nil {
		return nil, fmt.Errorf("failure: groups: decode: %w", err)
	}
	out := make([]Group, len(rows))
	for i, r := range rows {
		g := Group{Key: make(map[string]string, len(by)), Count: r.N, FirstFailedAt: r.First, LastFailedAt: r.Last, ExampleID: r.Ex}
		for j, k := range by {
			g.Key[k] = r.K[j]
		}
		out[i] = g
	}
	return out, nil
}

// encodePageToken makes List's page token: the last row's failed_at (Unix
// microseconds, PostgreSQL's precision) and id, base64url. Opaque to
// callers.
func encodePageToken(f *Failure) string {
	b := make([]byte, 24)
	binary.BigEndian.PutUint64(b, uint64(f.FailedAt.UnixMicro()))
	copy(b[8:], f.ID[:])
	return base64.RawURLEncoding.EncodeToString(b)
}

func parsePageToken(tok string) (time.Time, uuid.UUID, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) != 24 {
		return time.Time{}, uuid.Nil, fmt.Errorf("%w: page_token: not a token List returned", ErrInvalid)
	}
	id, _ := uuid.FromBytes(b[8:])
	return time.UnixMicro(int64(binary.BigEndian.Uint64(b))), id, nil
}

// List returns at most limit failures f selects (ListLimitDefault when
// limit is not positive, at most ListLimitMax), newest first (failed_at,
// then id, descending), and the token of the next page ("" at the end).
// Pages are keyset pages: a failure stored while paging shows up on the
// first page, not as a duplicate on a later one. Safe for concurrent use.
func (s *Store) List(ctx context.Context, f Filter, limit int, pageToken string) ([]Failure, string, error) {
	if err := f.validate(); err != nil {
		return nil, "", err
	}
	if limit <= 0 {
		limit = ListLimitDefault
	}
	limit = min(limit, ListLimitMax)
	w := newWhere().filter(&f)
	if pageToken != "" {
		at, id, err := parsePageToken(pageToken)
		if err != nil {
			return nil, "", err
		}
		w.add("(f.failed_at, f.id) < (" + w.arg(at) + ", " + w.arg(id) + ")")
	}
	lim := w.arg(limit + 1)
	ids, err := listIDs.One(ctx, s.db, built{SQL: listIDsSQL(w, lim), Args: w.args})
	if err != nil {
		return nil, "", fmt.Errorf("failure: list: %w", err)
	}
	more := len(ids) > limit
	if more {
		ids = ids[:limit]
	}
	out := make([]Failure, 0, len(ids))
	if len(ids) > 0 {
		err = byIDs.Each(ctx, s.db, ids, func(r failureRow) error {
			out = append(out, r.failure())
			return nil
		})
		if err != nil {
			return nil, "", fmt.Errorf("failure: list: %w", err)
		}
	}
	next := ""
	if more && len(out) > 0 {
		next = encodePageToken(&out[len(out)-1])
	}
	return out, next, nil
}

// Get returns one failure and its edits, oldest first; an unknown id wraps
// ErrNotFound. Safe for concurrent use.
func (s *Store) Get(ctx context.Context, id uuid.UUID) (Failure, []Edit, error) {
	r, found, err := byID.Find(ctx, s.db, id)
	switch {
	case err != nil:
		return Failure{}, nil, fmt.Errorf("failure: get %s: %w", id, err)
	case !found:
		return Failure{}, nil, fmt.Errorf("%w: failure %s", ErrNotFound, id)
	}
	edits, err := editsOf.All(ctx, s.db, id)
	if err != nil {
		return Failure{}, nil, fmt.Errorf("failure: get %s: edits: %w", id, err)
	}
	return r.failure(), edits, nil
}

// String names the choice as the audit log records it.
func (p Parked) String() string {
	switch p {
	case ParkedRelease:
		return "release"
	case ParkedDiscard:
		return "discard"
	}
	return "unspecified"
}

// Discard marks the unresolved (failed, parked, retrying) failures f
// selects discarded by actor, and returns how many, in one transaction
// with its audit entry (state.AuditFailureDiscard). The zero Filter is
// refused (ErrInvalid): discarding everything takes naming it. A filter
// matching no unresolved failure is ErrPrecondition. When the selection
// holds the head of an ordered pool's key (failed or retrying) with parked
// events behind it that the selection leaves out, parked says what
// becomes of them: ParkedUnspecified refuses (ErrPrecondition, with their
// number), ParkedDiscard discards them too, ParkedRelease leaves them to
// the workers, which apply them in order once nothing earlier of their
// key is unresolved. Safe for concurrent use: the selected rows are locked
// until the commit.
func (s *Store) Discard(ctx context.Context, f Filter, parked Parked, reason, actor string) (int64, error) {
	if f.empty() {
		return 0, fmt.Errorf("%w: %w", ErrInvalid, errEmptyFilter)
	}
	if err := f.validate(); err != nil {
		return 0, err
	}
	if parked > ParkedDiscard {
		return 0, fmt.Errorf("%w: parked: %d is not a choice", ErrInvalid, parked)
	}
	n, err := dbutil.WithTxV(ctx, s.db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) (int64, error) {
		w := newWhere().filter(&f).unresolved()
		ids, err := selectForDiscard.One(ctx, tx, built{SQL: selectForDiscardSQL(w), Args: w.args})
		if err != nil {
			return 0, err
		}
		if len(ids) == 0 {
			return 0, fmt.Errorf("%w: filter matches no unresolved failure", ErrPrecondition)
		}
		behind, err := parkedBehind.One(ctx, tx, ids)
		if err != nil {
			return 0, err
		}
		selected := make(map[uuid.UUID]bool, len(ids))
		for _, id := range ids {
			selected[id] = true
		}
		var extra []uuid.UUID
		for _, id := range behind {
			if !selected[id] {
				extra = append(extra, id)
			}
		}
		if len(extra) > 0 {
			switch parked {
			case ParkedUnspecified:
				return 0, fmt.Errorf("%w: %d parked events wait behind the failures to discard: choose release (apply them in order) or discard (discard them too)",
					ErrPrecondition, len(extra))
			case ParkedDiscard:
				ids = append(ids, extra...)
			case ParkedRelease:
			}
		}
		tag, err := discard.Run(ctx, tx, discardParams{IDs: ids, By: actor})
		if err != nil {
			return 0, err
		}
		target := cmp.Or(f.Pool, "*")
		detail := map[string]any{"count": tag.RowsAffected(), "filter": auditFilter(&f), "reason": reason,
			"parked": parked.String(), "parked_behind": len(extra)}
		if err := state.AppendAudit(ctx, tx, actor, state.AuditFailureDiscard, target, detail); err != nil {
			return 0, err
		}
		return tag.RowsAffected(), nil
	})
	if err != nil {
		return 0, fmt.Errorf("failure: discard: %w", err)
	}
	return n, nil
}
