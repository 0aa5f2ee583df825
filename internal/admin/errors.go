package admin

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/failure"
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
	// ErrNeedsRestart is a config change a running daemon cannot apply:
	// codes.FailedPrecondition.
	ErrNeedsRestart = errors.New("needs a restart")
	// ErrReloadFailed is a reload applied in part: a service or pool of the
	// new config did not start: codes.Internal, with what did not start.
	ErrReloadFailed = errors.New("reload failed")
	// ErrFailedPrecondition is a request the system's state refuses (a
	// replay of a service without archive, a selection matching nothing):
	// codes.FailedPrecondition.
	ErrFailedPrecondition = errors.New("failed precondition")
)

// ConfigError is a configuration that does not validate (or whose SQL does
// not prepare): codes.InvalidArgument, every problem in the message and as
// a google.rpc.BadRequest field violation (field = key path).
type ConfigError struct {
	// Problems are the mistakes, each with its key path.
	Problems []ConfigProblem
}

// ConfigProblem is one mistake of a configuration, with its key path
// (e.g. "services[2].sql_handlers[0].sql[1]"): config's own.
type ConfigProblem = config.Problem

// Error lists the problems, one per line.
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString("invalid configuration")
	for _, p := range e.Problems {
		b.WriteString("\n  " + p.Path + ": " + p.Message)
	}
	return b.String()
}

// status is e as a gRPC status with its field violations.
func (e *ConfigError) status() error {
	st := status.New(codes.InvalidArgument, e.Error())
	br := &errdetails.BadRequest{}
	for _, p := range e.Problems {
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: p.Path, Description: p.Message})
	}
	if withDetails, err := st.WithDetails(br); err == nil {
		st = withDetails
	}
	return st.Err()
}

// internalMessage is all a client learns of an unexpected error or a panic.
const internalMessage = "internal error"

// toStatus turns a Backend error into a gRPC status error. Sentinel errors,
// ours and the failure store's (failure.ErrNotFound, ErrInvalid,
// ErrPrecondition, which a backend may return unwrapped), keep their text; context errors become Canceled or DeadlineExceeded; any
// other error is logged and answered with codes.Internal and a generic
// message.
func (s *Server) toStatus(ctx context.Context, method string, err error) error {
	var cfgErr *ConfigError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &cfgErr):
		return cfgErr.status()
	case errors.Is(err, ErrNeedsRestart), errors.Is(err, ErrFailedPrecondition), errors.Is(err, failure.ErrPrecondition):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, ErrNotFound), errors.Is(err, failure.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, ErrInvalidArgument), errors.Is(err, failure.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, ErrBelowMinHorizon):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, ErrReloadFailed):
		s.logger.ErrorContext(ctx, "admin: reload failed", slog.String("method", method), slog.Any("error", err))
		return status.Error(codes.Internal, err.Error())
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
