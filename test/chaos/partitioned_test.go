package chaos

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestChaosExactlyOncePartitioned is TestChaosExactlyOnce with both
// services on a partitioned processed_event (processed_event: {partitions:
// daily}): the same faults, purges by partition drop, seeds of v7 ids, and
// two more bad inputs that only the database refuses (an id older than
// every partition, let through the guard by the operator's override
// header, and a UUID v4 id).
func TestChaosExactlyOncePartitioned(t *testing.T) {
	t.Parallel() // a world of its own: see doc.go
	runChaosExactlyOnce(t, true)
}

// partitionedServices adds the processed_event block to every service of
// a generated services list.
func partitionedServices(svcs *strings.Builder) *strings.Builder {
	var out strings.Builder
	out.WriteString(strings.ReplaceAll(svcs.String(), "    pools:\n", "    processed_event: {partitions: daily}\n    pools:\n"))
	return &out
}

// v7At is a random UUID v7 of instant t.
func v7At(t time.Time) uuid.UUID {
	var u uuid.UUID
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(t.UnixMilli()))
	copy(u[:6], ms[2:])
	_, _ = rand.Read(u[6:])
	u[6] = 0x70 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	return u
}

// seedIDsPartitioned returns n v7 ids of the instant age ago (a
// PostgreSQL interval) and attaches a partition for their day when the
// migrations did not create one (they create partitions from the horizon
// on): black-box DDL, as an operator restoring old rows would.
func (e *env) seedIDsPartitioned(db string, n int, age string) []uuid.UUID {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var at time.Time
	if err := e.db(db).QueryRow(ctx, `SELECT now() - $1::interval`, age).Scan(&at); err != nil {
		e.t.Fatalf("seed %s: %v", db, err)
	}
	day := at.UTC().Truncate(24 * time.Hour)
	var exists bool
	if err := e.db(db).QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, "processed_event_p"+day.Format("20060102")).Scan(&exists); err != nil {
		e.t.Fatalf("seed %s: %v", db, err)
	}
	if !exists {
		name := "processed_event_p" + day.Format("20060102")
		lo, hi := v7Floor(day), v7Floor(day.Add(24*time.Hour))
		if _, err := e.db(db).Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (LIKE processed_event INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
			ALTER TABLE processed_event ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')`, name, name, lo, hi)); err != nil {
			e.t.Fatalf("seed %s: partition for %s: %v", db, day, err)
		}
	}
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = v7At(at.Add(-time.Duration(i) * time.Millisecond))
	}
	return ids
}

// v7Floor is the partition bound of instant t: its milliseconds, zeros.
func v7Floor(t time.Time) uuid.UUID {
	var u uuid.UUID
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(t.UnixMilli()))
	copy(u[:6], ms[2:])
	return u
}

// partitionedBadInputs adds the inputs a partitioned table refuses: an
// event ten days old let through the guard by the override header (the
// database refuses it: beyond_horizon) and a UUID v4 id (permanent).
func partitionedBadInputs(stock func(kind, reason, body string) *badInput, body func(id uuid.UUID) []byte) {
	old := stock("partitioned: v7 id older than every partition, guard overridden", reasonBeyondHorizon, "")
	old.eventID = v7At(time.Now().Add(-10 * 24 * time.Hour))
	old.body = body(old.eventID)
	old.headers = amqp.Table{"x-beyond-horizon-override": true}
	v4 := stock("partitioned: UUID v4 id", reasonPermanent, "")
	v4.eventID = uuid.New()
	v4.body = body(v4.eventID)
}
