package daemon

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/failure"
)

// errWorkbenchUnbuilt answers the failure workbench's calls until they are
// built over the services' failure stores.
var errWorkbenchUnbuilt = errors.New("daemon: the failure workbench is not built yet")

// ListFailureGroups implements admin.Backend.
func (b *backend) ListFailureGroups(context.Context, string, failure.Filter, []string) ([]failure.Group, error) {
	return nil, errWorkbenchUnbuilt
}

// ListFailedEvents implements admin.Backend.
func (b *backend) ListFailedEvents(context.Context, string, failure.Filter, int, string) ([]admin.FailedEvent, string, error) {
	return nil, "", errWorkbenchUnbuilt
}

// GetFailedEvent implements admin.Backend.
func (b *backend) GetFailedEvent(context.Context, uuid.UUID) (admin.FailedEvent, error) {
	return admin.FailedEvent{}, errWorkbenchUnbuilt
}

// RetryFailedEvents implements admin.Backend.
func (b *backend) RetryFailedEvents(context.Context, string, failure.RetryRequest, string) (admin.FailureRetry, error) {
	return admin.FailureRetry{}, errWorkbenchUnbuilt
}

// GetFailureRetry implements admin.Backend.
func (b *backend) GetFailureRetry(context.Context, string, uuid.UUID) (admin.FailureRetry, error) {
	return admin.FailureRetry{}, errWorkbenchUnbuilt
}

// ListFailureRetries implements admin.Backend.
func (b *backend) ListFailureRetries(context.Context, string, int) ([]admin.FailureRetry, error) {
	return nil, errWorkbenchUnbuilt
}

// CancelFailureRetry implements admin.Backend.
func (b *backend) CancelFailureRetry(context.Context, string, uuid.UUID, string) (admin.FailureRetry, error) {
	return admin.FailureRetry{}, errWorkbenchUnbuilt
}

// DiscardFailedEvents implements admin.Backend.
func (b *backend) DiscardFailedEvents(context.Context, string, failure.Filter, failure.Parked, string, string) (int64, error) {
	return 0, errWorkbenchUnbuilt
}

// EditFailedEvent implements admin.Backend.
func (b *backend) EditFailedEvent(context.Context, uuid.UUID, []byte, string, string) (admin.FailedEvent, error) {
	return admin.FailedEvent{}, errWorkbenchUnbuilt
}
