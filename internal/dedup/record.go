package dedup

import (
	"bytes"
	"context"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// record inserts the ids of ts in tx, marks the tasks whose id was already
// there duplicates and returns the others (all of ts in bench builds that
// skip the insert).
func (p *Processor) record(ctx context.Context, tx pgx.Tx, ts []*task) ([]*task, error) {
	if skipDedupInsert {
		return ts, nil
	}
	// [16]byte encodes directly; pgtype.UUID goes through its Valuer and
	// allocates per element.
	ids := make([][16]byte, len(ts))
	for i, t := range ts {
		ids[i] = t.ev.ID
	}
	ictx, span := p.tr.start(ctx, SpanInsert, insertAttrs...)
	inserted, err := RecordIDs(ictx, tx, ids)
	endInsert(span, len(inserted), err)
	if err != nil {
		if refusedByTable(err) {
			return nil, &refusal{cause: err}
		}
		return nil, err
	}
	fresh := make([]*task, 0, len(ts))
	for _, t := range ts {
		if _, ok := inserted[t.ev.ID]; !ok {
			t.result = Result{Outcome: OutcomeDuplicate}
			continue
		}
		fresh = append(fresh, t)
	}
	return fresh, nil
}

// RecordIDs is the dedup step's statement: it inserts ids into
// processed_event in tx with one INSERT ... ON CONFLICT DO NOTHING and
// returns those that were not there (an id given twice is inserted once).
// It sorts ids in place.
func RecordIDs(ctx context.Context, tx pgx.Tx, ids [][16]byte) (map[uuid.UUID]struct{}, error) {
	// Lock rows in one global order: two daemons inserting overlapping
	// ids (relay republishes) in different orders would deadlock (40P01).
	slices.SortFunc(ids, func(a, b [16]byte) int { return bytes.Compare(a[:], b[:]) })
	inserted := make(map[uuid.UUID]struct{}, len(ids))
	err := insertProcessed.Each(ctx, tx, insertProcessedParams{IDs: ids}, func(id [16]byte) error {
		inserted[id] = struct{}{}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return inserted, nil
}
