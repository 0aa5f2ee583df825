package dedup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/internal/dbpool"
)

// ErrNotFound is returned by Lookup for an id with no processed_event row.
var ErrNotFound = errors.New("dedup: event not processed")

// Lookup returns when id was processed, or ErrNotFound.
func Lookup(ctx context.Context, db dbpool.DB, id uuid.UUID) (time.Time, error) {
	at, err := lookupProcessed.One(ctx, db, lookupProcessedParams{ID: id})
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, ErrNotFound
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("dedup: lookup %s: %w", id, err)
	}
	return at, nil
}
