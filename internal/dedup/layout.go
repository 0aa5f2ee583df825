package dedup

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/platformd/platformd/internal/query"
)

// Layout is the shape of a service's processed_event table, as the
// database's catalog says: the dedup step's statement is the same for
// both, the purge and the horizon in force differ.
type Layout uint8

// The layouts of processed_event.
const (
	// LayoutPlain is the contract's table (docs/contracts.md): event_id primary
	// key, processed_at indexed, purged by chunked DELETE on processed_at.
	LayoutPlain Layout = iota + 1
	// LayoutPartitioned is the opt-in table range-partitioned on event_id
	// by UUID v7 time, one partition per UTC day (PartitionWidth), no
	// default partition and no processed_at index; it accepts v7 ids only
	// (a CHECK constraint) and is purged by detaching and dropping whole
	// partitions.
	LayoutPartitioned
)

// String returns the layout's name as the migrate command spells it.
func (l Layout) String() string {
	switch l {
	case LayoutPlain:
		return "plain"
	case LayoutPartitioned:
		return "partitioned"
	}
	return fmt.Sprintf("Layout(%d)", uint8(l))
}

// ParseLayout parses "plain" or "partitioned".
func ParseLayout(s string) (Layout, error) {
	switch s {
	case "plain":
		return LayoutPlain, nil
	case "partitioned":
		return LayoutPartitioned, nil
	}
	return 0, fmt.Errorf("dedup: unknown processed_event layout %q (want plain or partitioned)", s)
}

// PartitionWidth is the span of one partition of a partitioned
// processed_event: a UTC day.
const PartitionWidth = 24 * time.Hour

// ErrNoTable is DetectLayout's error when processed_event does not exist
// (the platform migrations have not run).
var ErrNoTable = errors.New("dedup: processed_event does not exist")

// DetectLayout reads processed_event's layout from the catalog (one
// indexed lookup: cheap enough for every purge run and horizon refresh).
// It is safe for concurrent use.
func DetectLayout(ctx context.Context, db query.Querier) (Layout, error) {
	kind, _, err := detectLayout.Find(ctx, db, query.NoParams{})
	if err != nil {
		return 0, fmt.Errorf("dedup: detect processed_event layout: %w", err)
	}
	switch {
	case kind == nil:
		return 0, ErrNoTable
	case *kind == "p":
		return LayoutPartitioned, nil
	case *kind == "r":
		return LayoutPlain, nil
	}
	return 0, fmt.Errorf("dedup: processed_event is a relation of kind %q, not a table", *kind)
}

// HorizonInForce is the horizon the purge applies to a table of layout l:
// h itself for the plain table; for a partitioned one, h rounded up to a
// whole number of partitions (partitions go whole, so a row is kept from
// that horizon to that horizon plus one partition's width after its id's
// time). The beyond-horizon guard applies the same value.
func HorizonInForce(l Layout, h time.Duration) time.Duration {
	if l != LayoutPartitioned || h <= 0 {
		return h
	}
	n := (h + PartitionWidth - 1) / PartitionWidth
	return n * PartitionWidth
}

// IsV7 reports whether id is a UUID version 7, the only ids a partitioned
// processed_event accepts.
func IsV7(id uuid.UUID) bool { return id.Version() == 7 }

// V7Time is the instant a UUID v7 carries (its first 48 bits, Unix
// milliseconds); meaningless for other versions.
func V7Time(id uuid.UUID) time.Time {
	var b [8]byte
	copy(b[2:], id[:6])
	return time.UnixMilli(int64(binary.BigEndian.Uint64(b[:])))
}

// FloorUUID is the smallest UUID v7 of instant t's millisecond: the time
// bits of t and every other bit zero (so not itself a valid v7), the
// bound partitions are ranged on.
func FloorUUID(t time.Time) uuid.UUID {
	var u uuid.UUID
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(t.UnixMilli()))
	copy(u[:6], b[2:])
	return u
}
