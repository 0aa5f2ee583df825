package admin

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors a Backend wraps (fmt.Errorf("...: %w", ErrX)) to choose the
// gRPC code of its failure. The wrapped error's text is sent to the client,
// so it must not hold secrets.
var (
	// ErrNotFound is an unknown service, pool or event: codes.NotFound.
	ErrNotFound = errors.New("not found")
	// ErrInvalidArgument is a request the backend refuses as malformed:
	// codes.InvalidArgument.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrBelowMinHorizon is a horizon under the service's minimum without
	// force: codes.FailedPrecondition.
	ErrBelowMinHorizon = errors.New("horizon below min_horizon")
	// ErrUnavailable is a dependency (database, broker) that cannot be
	// reached: codes.Unavailable.
	ErrUnavailable = errors.New("unavailable")
)

// internalMessage is all a client learns of an unexpected error or a panic.
const internalMessage = "internal error"

// toStatus turns a Backend error into a gRPC status error. Sentinel errors
// keep their text; context errors become Canceled or DeadlineExceeded; any
// other error is logged and answered with codes.Internal and a generic
// message.
func (s *Server) toStatus(ctx context.Context, method string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, ErrInvalidArgument):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, ErrBelowMinHorizon):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, ErrUnavailable):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, context.Canceled.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
	default:
		s.logger.ErrorContext(ctx, "admin: backend error",
			slog.String("method", method), slog.Any("error", err))
		return status.Error(codes.Internal, internalMessage)
	}
}
