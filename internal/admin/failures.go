package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/failure"
)

// The failure workbench's RPCs (docs/failures.md): requests checked,
// turned into the failure package's types, and the backend's answers
// converted.

// FailureRetryRateMax is the highest pace a retry of failures may ask for
// (copies per second).
const FailureRetryRateMax = 100_000

// failureStates are the states a filter may name.
var failureStates = []string{
	failure.StateFailed, failure.StateParked, failure.StateRetrying, failure.StateResolved, failure.StateDiscarded,
}

// failureGroupKeys are the keys ListFailureGroups may group by.
var failureGroupKeys = []string{
	failure.GroupReason, failure.GroupHandler, failure.GroupEventName, failure.GroupFingerprint, failure.GroupPool,
}

// failureGroupByDefault is what ListFailureGroups groups by when the
// request names no key: the failures' cause.
var failureGroupByDefault = []string{failure.GroupReason, failure.GroupFingerprint}

// failureRetryStates maps failure.Retry.State to the API's enum; a dry
// run's "" is FAILURE_RETRY_STATE_UNSPECIFIED.
var failureRetryStates = map[string]adminv1.FailureRetryState{
	failure.RetryCanary:       adminv1.FailureRetryState_FAILURE_RETRY_STATE_CANARY,
	failure.RetryRunning:      adminv1.FailureRetryState_FAILURE_RETRY_STATE_RUNNING,
	failure.RetryDone:         adminv1.FailureRetryState_FAILURE_RETRY_STATE_DONE,
	failure.RetryCanaryFailed: adminv1.FailureRetryState_FAILURE_RETRY_STATE_CANARY_FAILED,
	failure.RetryCancelled:    adminv1.FailureRetryState_FAILURE_RETRY_STATE_CANCELLED,
}

// discardParked maps the API's DiscardParked to failure.Parked.
var discardParked = map[adminv1.DiscardParked]failure.Parked{
	adminv1.DiscardParked_DISCARD_PARKED_UNSPECIFIED: failure.ParkedUnspecified,
	adminv1.DiscardParked_DISCARD_PARKED_RELEASE:     failure.ParkedRelease,
	adminv1.DiscardParked_DISCARD_PARKED_DISCARD:     failure.ParkedDiscard,
}

// checkFailureState checks a filter's state (field names it): one of
// failureStates, or "" for any.
func checkFailureState(field, state string) error {
	if state != "" && !slices.Contains(failureStates, state) {
		return invalid("%s %q is not a state, want one of %s", field, state, strings.Join(failureStates, ", "))
	}
	return nil
}

// checkText checks a filter's text field: valid UTF-8 without NUL bytes,
// which PostgreSQL's text refuses (the database's error would otherwise
// answer a bad request).
func checkText(field, value string) error {
	switch {
	case !utf8.ValidString(value):
		return invalid("%s is not valid UTF-8", field)
	case strings.IndexByte(value, 0) >= 0:
		return invalid("%s holds a NUL byte", field)
	}
	return nil
}

// failedAtRange checks the from and to of a filter (prefix names it, ""
// or "filter.") and returns them, zero when unset.
func failedAtRange(prefix string, fromPB, toPB *timestamppb.Timestamp) (from, to time.Time, err error) {
	if fromPB != nil {
		if err := fromPB.CheckValid(); err != nil {
			return from, to, invalid("%sfrom: %v", prefix, err)
		}
		from = fromPB.AsTime()
	}
	if toPB != nil {
		if err := toPB.CheckValid(); err != nil {
			return from, to, invalid("%sto: %v", prefix, err)
		}
		to = toPB.AsTime()
	}
	if fromPB != nil && toPB != nil && !from.Before(to) {
		return from, to, invalid("%sfrom (%s) must be before %sto (%s)", prefix, from.Format(time.RFC3339Nano), prefix, to.Format(time.RFC3339Nano))
	}
	return from, to, nil
}

// failureFilter checks a request's FailureFilter and returns the service
// it names ("" with the pool set) and the store's filter.
func failureFilter(pb *adminv1.FailureFilter) (string, failure.Filter, error) {
	var f failure.Filter
	if pb.GetService() == "" && pb.GetPool() == "" {
		return "", f, invalid("filter.service: required unless filter.pool is set")
	}
	if err := checkFailureState("filter.state", pb.GetState()); err != nil {
		return "", f, err
	}
	for _, fv := range [...]struct{ field, value string }{
		{"filter.service", pb.GetService()}, {"filter.pool", pb.GetPool()}, {"filter.reason", pb.GetReason()},
		{"filter.handler", pb.GetHandler()}, {"filter.event_name", pb.GetEventName()},
		{"filter.fingerprint", pb.GetFingerprint()}, {"filter.text", pb.GetText()},
	} {
		if err := checkText(fv.field, fv.value); err != nil {
			return "", f, err
		}
	}
	from, to, err := failedAtRange("filter.", pb.GetFrom(), pb.GetTo())
	if err != nil {
		return "", f, err
	}
	if n := len(pb.GetIds()); n > ListLimitMax {
		return "", f, invalid("filter.ids: %d ids, at most %d allowed", n, ListLimitMax)
	}
	for i, s := range pb.GetIds() {
		id, err := parseEventID(fmt.Sprintf("filter.ids[%d]", i), s)
		if err != nil {
			return "", f, err
		}
		f.IDs = append(f.IDs, id)
	}
	f.Pool, f.Reason, f.Handler, f.EventName, f.Fingerprint = pb.GetPool(), pb.GetReason(), pb.GetHandler(), pb.GetEventName(), pb.GetFingerprint()
	f.State, f.From, f.To, f.Text = pb.GetState(), from, to, pb.GetText()
	return pb.GetService(), f, nil
}

// failureFilterToProto converts a stored retry's filter.
func failureFilterToProto(service string, f failure.Filter) *adminv1.FailureFilter {
	out := &adminv1.FailureFilter{
		Service: service, Pool: f.Pool, Reason: f.Reason, Handler: f.Handler, EventName: f.EventName,
		Fingerprint: f.Fingerprint, From: timestampOrNil(f.From), To: timestampOrNil(f.To), State: f.State, Text: f.Text,
	}
	for _, id := range f.IDs {
		out.Ids = append(out.Ids, id.String())
	}
	return out
}

// uuidOrEmpty is id's text, "" for uuid.Nil.
func uuidOrEmpty(id uuid.UUID) string {
	if id == uuid.Nil {
		return ""
	}
	return id.String()
}

// headersToProto converts a failure's headers. They are JSON values
// already; any value structpb does not take is sent as its JSON text's
// value (a round trip through encoding/json), and one that is not JSON at
// all as its fmt text, so that no header is lost.
func headersToProto(h map[string]any) *structpb.Struct {
	if h == nil {
		return nil
	}
	if s, err := structpb.NewStruct(h); err == nil {
		return s
	}
	out := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(h))}
	for k, v := range h {
		pv, err := structpb.NewValue(v)
		if err != nil {
			pv = jsonValueToProto(v)
		}
		out.Fields[k] = pv
	}
	return out
}

// jsonValueToProto converts v through its JSON encoding.
func jsonValueToProto(v any) *structpb.Value {
	b, err := json.Marshal(v)
	if err == nil {
		var decoded any
		if err = json.Unmarshal(b, &decoded); err == nil {
			if pv, err := structpb.NewValue(decoded); err == nil {
				return pv
			}
		}
	}
	return structpb.NewStringValue(fmt.Sprint(v))
}

// failedEventToProto converts a FailedEvent (its edits apart).
func failedEventToProto(e FailedEvent) *adminv1.FailedEvent {
	return &adminv1.FailedEvent{
		Id: uuidOrEmpty(e.ID), Service: e.Service, Pool: e.Pool, EventId: uuidOrEmpty(e.EventID), EventName: e.EventName,
		RoutingKey: e.RoutingKey, Headers: headersToProto(e.Headers), Body: e.Body, Reason: e.Reason, Error: e.Error,
		Fingerprint: e.Fingerprint, Handler: e.Handler, Attempt: clampInt32(e.Attempt),
		FirstFailedAt: timestampOrNil(e.FirstFailedAt), FailedAt: timestampOrNil(e.FailedAt), Copies: clampInt32(e.Copies),
		SequenceKey: e.SequenceKey, State: e.State, ResolvedAt: timestampOrNil(e.ResolvedAt), ResolvedBy: e.ResolvedBy,
		EditedBody: e.EditedBody, EditedAt: timestampOrNil(e.EditedAt), EditedBy: e.EditedBy, RetryId: uuidOrEmpty(e.RetryID),
		UpdatedAt: timestampOrNil(e.UpdatedAt),
	}
}

// failureEditToProto converts an Edit: its diff as JSON text.
func failureEditToProto(e failure.Edit) *adminv1.FailedEventEdit {
	return &adminv1.FailedEventEdit{EditedAt: timestampOrNil(e.EditedAt), EditedBy: e.EditedBy, Reason: e.Reason, Diff: string(e.Diff)}
}

// failureGroupToProto converts a Group.
func failureGroupToProto(g failure.Group) *adminv1.FailureGroup {
	return &adminv1.FailureGroup{
		Key: g.Key, Count: g.Count, FirstFailedAt: timestampOrNil(g.FirstFailedAt),
		LastFailedAt: timestampOrNil(g.LastFailedAt), ExampleId: uuidOrEmpty(g.ExampleID),
	}
}

// failureRetryToProto converts a FailureRetry.
func failureRetryToProto(r FailureRetry) *adminv1.FailureRetry {
	return &adminv1.FailureRetry{
		Id: uuidOrEmpty(r.ID), Service: r.Service, State: failureRetryStates[r.State], Selected: r.Selected, Sent: r.Sent,
		Resolved: r.Resolved, FailedAgain: r.FailedAgain, Canary: clampInt32(r.Canary), Rate: clampInt32(r.Rate),
		CreatedBy: r.CreatedBy, CreatedAt: timestampOrNil(r.CreatedAt), FinishedAt: timestampOrNil(r.FinishedAt),
		Error: r.Error, Filter: failureFilterToProto(r.Service, r.Filter), OverrideBeyondHorizon: r.OverrideBeyondHorizon,
		CancelledBy: r.CancelledBy,
	}
}

// ListFailureGroups implements AdminService.ListFailureGroups.
func (s *Server) ListFailureGroups(ctx context.Context, req *adminv1.ListFailureGroupsRequest) (*adminv1.ListFailureGroupsResponse, error) {
	if req.GetService() == "" && req.GetPool() == "" {
		return nil, invalid("service: required unless pool is set")
	}
	if err := checkFailureState("state", req.GetState()); err != nil {
		return nil, err
	}
	from, to, err := failedAtRange("", req.GetFrom(), req.GetTo())
	if err != nil {
		return nil, err
	}
	by := req.GetGroupBy()
	for i, k := range by {
		switch {
		case !slices.Contains(failureGroupKeys, k):
			return nil, invalid("group_by[%d] %q is not a key, want one of %s", i, k, strings.Join(failureGroupKeys, ", "))
		case slices.Contains(by[:i], k):
			return nil, invalid("group_by[%d] %q is named twice", i, k)
		}
	}
	if len(by) == 0 {
		by = failureGroupByDefault
	}
	f := failure.Filter{Pool: req.GetPool(), State: req.GetState(), From: from, To: to}
	groups, err := s.backend.ListFailureGroups(ctx, req.GetService(), f, slices.Clone(by))
	if err != nil {
		return nil, s.toStatus(ctx, "ListFailureGroups", err)
	}
	return &adminv1.ListFailureGroupsResponse{Groups: toProtos(groups, failureGroupToProto)}, nil
}

// ListFailedEvents implements AdminService.ListFailedEvents.
func (s *Server) ListFailedEvents(ctx context.Context, req *adminv1.ListFailedEventsRequest) (*adminv1.ListFailedEventsResponse, error) {
	service, f, err := failureFilter(req.GetFilter())
	if err != nil {
		return nil, err
	}
	limit, err := listLimit(req.GetLimit())
	if err != nil {
		return nil, err
	}
	events, next, err := s.backend.ListFailedEvents(ctx, service, f, limit, req.GetPageToken())
	if err != nil {
		return nil, s.toStatus(ctx, "ListFailedEvents", err)
	}
	return &adminv1.ListFailedEventsResponse{Failures: toProtos(events, failedEventToProto), NextPageToken: next}, nil
}

// GetFailedEvent implements AdminService.GetFailedEvent.
func (s *Server) GetFailedEvent(ctx context.Context, req *adminv1.GetFailedEventRequest) (*adminv1.GetFailedEventResponse, error) {
	id, err := parseEventID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	e, err := s.backend.GetFailedEvent(ctx, id)
	if err != nil {
		return nil, s.toStatus(ctx, "GetFailedEvent", err)
	}
	return &adminv1.GetFailedEventResponse{Failure: failedEventToProto(e), Edits: toProtos(e.Edits, failureEditToProto)}, nil
}

// RetryFailedEvents implements AdminService.RetryFailedEvents.
func (s *Server) RetryFailedEvents(ctx context.Context, req *adminv1.RetryFailedEventsRequest) (*adminv1.RetryFailedEventsResponse, error) {
	service, f, err := failureFilter(req.GetFilter())
	if err != nil {
		return nil, err
	}
	r := failure.RetryRequest{
		Filter: f, Canary: int(req.GetCanary()), Rate: int(req.GetRate()), DryRun: req.GetDryRun(),
		OverrideBeyondHorizon: req.GetOverrideBeyondHorizon(),
	}
	if r.Canary < 0 {
		return nil, invalid("canary must not be negative, got %d", r.Canary)
	}
	switch {
	case r.Rate < 0 || r.Rate > FailureRetryRateMax:
		return nil, invalid("rate must be between 1 and %d copies/s (0 means %d), got %d", FailureRetryRateMax, failure.RetryRateDefault, r.Rate)
	case r.Rate == 0:
		r.Rate = failure.RetryRateDefault
	}
	retry, err := s.backend.RetryFailedEvents(ctx, service, r, ActorFromContext(ctx))
	if err != nil {
		return nil, s.toStatus(ctx, "RetryFailedEvents", err)
	}
	return &adminv1.RetryFailedEventsResponse{Retry: failureRetryToProto(retry)}, nil
}

// GetFailureRetry implements AdminService.GetFailureRetry.
func (s *Server) GetFailureRetry(ctx context.Context, req *adminv1.GetFailureRetryRequest) (*adminv1.GetFailureRetryResponse, error) {
	id, err := parseEventID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	r, err := s.backend.GetFailureRetry(ctx, req.GetService(), id)
	if err != nil {
		return nil, s.toStatus(ctx, "GetFailureRetry", err)
	}
	return &adminv1.GetFailureRetryResponse{Retry: failureRetryToProto(r)}, nil
}

// ListFailureRetries implements AdminService.ListFailureRetries.
func (s *Server) ListFailureRetries(ctx context.Context, req *adminv1.ListFailureRetriesRequest) (*adminv1.ListFailureRetriesResponse, error) {
	limit, err := listLimit(req.GetLimit())
	if err != nil {
		return nil, err
	}
	retries, err := s.backend.ListFailureRetries(ctx, req.GetService(), limit)
	if err != nil {
		return nil, s.toStatus(ctx, "ListFailureRetries", err)
	}
	return &adminv1.ListFailureRetriesResponse{Retries: toProtos(retries, failureRetryToProto)}, nil
}

// CancelFailureRetry implements AdminService.CancelFailureRetry.
func (s *Server) CancelFailureRetry(ctx context.Context, req *adminv1.CancelFailureRetryRequest) (*adminv1.CancelFailureRetryResponse, error) {
	id, err := parseEventID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	r, err := s.backend.CancelFailureRetry(ctx, req.GetService(), id, ActorFromContext(ctx))
	if err != nil {
		return nil, s.toStatus(ctx, "CancelFailureRetry", err)
	}
	return &adminv1.CancelFailureRetryResponse{Retry: failureRetryToProto(r)}, nil
}

// DiscardFailedEvents implements AdminService.DiscardFailedEvents.
func (s *Server) DiscardFailedEvents(ctx context.Context, req *adminv1.DiscardFailedEventsRequest) (*adminv1.DiscardFailedEventsResponse, error) {
	service, f, err := failureFilter(req.GetFilter())
	if err != nil {
		return nil, err
	}
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	parked, ok := discardParked[req.GetParked()]
	if !ok {
		return nil, invalid("parked %d is not a choice, want DISCARD_PARKED_UNSPECIFIED, _RELEASE or _DISCARD", req.GetParked())
	}
	n, err := s.backend.DiscardFailedEvents(ctx, service, f, parked, req.GetReason(), ActorFromContext(ctx))
	if err != nil {
		return nil, s.toStatus(ctx, "DiscardFailedEvents", err)
	}
	return &adminv1.DiscardFailedEventsResponse{Discarded: n}, nil
}

// EditFailedEvent implements AdminService.EditFailedEvent.
func (s *Server) EditFailedEvent(ctx context.Context, req *adminv1.EditFailedEventRequest) (*adminv1.EditFailedEventResponse, error) {
	id, err := parseEventID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	payload := []byte(req.GetPayload())
	if !json.Valid(payload) {
		return nil, invalid("payload: not JSON text")
	}
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	e, err := s.backend.EditFailedEvent(ctx, id, payload, req.GetReason(), ActorFromContext(ctx))
	if err != nil {
		return nil, s.toStatus(ctx, "EditFailedEvent", err)
	}
	return &adminv1.EditFailedEventResponse{Failure: failedEventToProto(e), Edits: toProtos(e.Edits, failureEditToProto)}, nil
}
