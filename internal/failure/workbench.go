package failure

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
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

var errUnbuilt = errors.New("failure: not built yet")

// Groups counts the failures f selects by the keys by (at least one of the
// Group… constants), largest groups first.
func (s *Store) Groups(ctx context.Context, f Filter, by []string) ([]Group, error) {
	return nil, errUnbuilt
}

// List returns at most limit failures f selects, newest first, and the
// token of the next page ("" at the end).
func (s *Store) List(ctx context.Context, f Filter, limit int, pageToken string) ([]Failure, string, error) {
	return nil, "", errUnbuilt
}

// Get returns one failure and its edits, oldest first.
func (s *Store) Get(ctx context.Context, id uuid.UUID) (Failure, []Edit, error) {
	return Failure{}, nil, errUnbuilt
}

// Discard marks the unresolved failures f selects discarded, audited, and
// returns how many.
func (s *Store) Discard(ctx context.Context, f Filter, parked Parked, reason, actor string) (int64, error) {
	return 0, errUnbuilt
}

// EditBody sets a failure's edited body, keeping its original, audited.
func (s *Store) EditBody(ctx context.Context, id uuid.UUID, payload []byte, reason, actor string) (Failure, error) {
	return Failure{}, errUnbuilt
}

// CreateRetry freezes the selection of req and stores a retry the runner
// will send (or, with DryRun, only counts it).
func (s *Store) CreateRetry(ctx context.Context, req RetryRequest, actor string) (Retry, error) {
	return Retry{}, errUnbuilt
}

// GetRetry returns one retry with its counts.
func (s *Store) GetRetry(ctx context.Context, id uuid.UUID) (Retry, error) {
	return Retry{}, errUnbuilt
}

// ListRetries returns the newest retries, at most limit.
func (s *Store) ListRetries(ctx context.Context, limit int) ([]Retry, error) {
	return nil, errUnbuilt
}

// CancelRetry stops a retry that has not finished, audited.
func (s *Store) CancelRetry(ctx context.Context, id uuid.UUID, actor string) (Retry, error) {
	return Retry{}, errUnbuilt
}
