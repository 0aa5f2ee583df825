package dedup

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Layout is the shape of a service's processed_event table, as the
// database's catalog says: the dedup step's statement is the same for
// both, the purge and the horizon in force differ.
type Layout uint8

// The layouts of processed_event.
const (
	// LayoutPlain is the contract's table (DESIGN.md): event_id primary
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

// Querier is what the layout functions need of a connection, a pool or a
// transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DetectLayout reads processed_event's layout from the catalog (one
// indexed lookup: cheap enough for every purge run and horizon refresh).
// It is safe for concurrent use.
func DetectLayout(ctx context.Context, db Querier) (Layout, error) {
	var kind *string
	if err := db.QueryRow(ctx, `SELECT c.relkind::text FROM pg_class c
		WHERE c.oid = to_regclass('processed_event')`).Scan(&kind); err != nil && !errors.Is(err, pgx.ErrNoRows) {
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

// v7CheckSQL is the expression a partitioned table's CHECK constraint
// holds: the id's version nibble is 7.
const v7CheckSQL = `((get_byte(uuid_send(event_id), 6) >> 4) = 7)`

// plainDDL creates the contract's table (as migration 001 does).
const plainDDL = `CREATE TABLE processed_event (
    event_id     uuid        PRIMARY KEY,
    processed_at timestamptz NOT NULL
);
CREATE INDEX processed_event_processed_at_idx ON processed_event (processed_at)`

// partitionedDDL creates the partitioned table, without partitions.
const partitionedDDL = `CREATE TABLE processed_event (
    event_id     uuid        NOT NULL,
    processed_at timestamptz NOT NULL,
    CONSTRAINT processed_event_pkey PRIMARY KEY (event_id),
    CONSTRAINT processed_event_v7 CHECK ` + v7CheckSQL + `
) PARTITION BY RANGE (event_id)`
