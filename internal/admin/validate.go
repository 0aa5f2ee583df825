package admin

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Request limits.
const (
	// ListLimitDefault is the number of items a listing returns when its
	// limit is 0.
	ListLimitDefault = 100
	// ListLimitMax is the largest limit a listing accepts, and the most
	// event ids RetryFailedMessages accepts.
	ListLimitMax = 10000
	// MaxReasonBytes is the longest pause reason accepted, in bytes.
	MaxReasonBytes = 1024
)

// invalid returns a codes.InvalidArgument status error.
func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// requireName checks that the required name field is set.
func requireName(field, value string) error {
	if value == "" {
		return invalid("%s is required", field)
	}
	return nil
}

// parseEventID parses an event id, which must be a UUID in canonical
// hyphenated form (8-4-4-4-12 hex digits, either case) and not the nil UUID.
// uuid.Parse alone would also take braces, a urn:uuid: prefix or no
// hyphens.
func parseEventID(field, s string) (uuid.UUID, error) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return uuid.Nil, invalid("%s %q is not a UUID in canonical form (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", field, s)
	}
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, invalid("%s %q is not a UUID in canonical form (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", field, s)
	}
	if id == uuid.Nil {
		return uuid.Nil, invalid("%s must not be the nil UUID", field)
	}
	return id, nil
}

// listLimit checks a listing's limit and applies its default.
func listLimit(limit int32) (int, error) {
	switch {
	case limit == 0:
		return ListLimitDefault, nil
	case limit < 0 || limit > ListLimitMax:
		return 0, invalid("limit %d out of range, want 0 (default %d) to %d", limit, ListLimitDefault, ListLimitMax)
	default:
		return int(limit), nil
	}
}

// positiveDuration checks a required, positive duration that fits in a
// time.Duration.
func positiveDuration(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, invalid("%s is required", field)
	}
	if err := d.CheckValid(); err != nil {
		return 0, invalid("%s: %v", field, err)
	}
	if d.GetSeconds() > math.MaxInt64/int64(time.Second)-1 {
		return 0, invalid("%s is too long", field)
	}
	v := d.AsDuration()
	if v <= 0 {
		return 0, invalid("%s must be positive, got %v", field, v)
	}
	return v, nil
}

// ReasonProblem says what is wrong with a pause reason, "" when nothing:
// longer than MaxReasonBytes, not UTF-8, or holding a NUL byte (PostgreSQL
// text refuses the last two, which would otherwise surface as the
// database's error instead of a bad request). The console checks its
// form with it too.
func ReasonProblem(reason string) string {
	switch {
	case len(reason) > MaxReasonBytes:
		return fmt.Sprintf("reason is %d bytes, at most %d allowed", len(reason), MaxReasonBytes)
	case !utf8.ValidString(reason):
		return "reason is not valid UTF-8"
	case strings.IndexByte(reason, 0) >= 0:
		return "reason holds a NUL byte"
	}
	return ""
}

// checkReason checks a pause reason (ReasonProblem).
func checkReason(reason string) error {
	if p := ReasonProblem(reason); p != "" {
		return invalid("%s", p)
	}
	return nil
}

// retryTargets checks RetryFailedMessages' choice of messages: exactly one of
// ids and all.
func retryTargets(ids []string, all bool) ([]uuid.UUID, error) {
	switch {
	case all && len(ids) > 0:
		return nil, invalid("set either event_ids or all, not both")
	case all:
		return nil, nil
	case len(ids) == 0:
		return nil, invalid("set event_ids or all")
	case len(ids) > ListLimitMax:
		return nil, invalid("%d event_ids, at most %d allowed", len(ids), ListLimitMax)
	}
	out := make([]uuid.UUID, 0, len(ids))
	for i, s := range ids {
		id, err := parseEventID(fmt.Sprintf("event_ids[%d]", i), s)
		if err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, nil
}
