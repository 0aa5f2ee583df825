package exactly

import (
	"github.com/google/uuid"
)

// Recorded is what a service's processed_event must hold.
type Recorded struct {
	// DB names the service's database in problems.
	DB string
	// Sent are the good events the service consumes: each has its row.
	Sent []uuid.UUID
	// Count makes Recorded count each of Sent found as applied and each
	// missing as lost: for a service whose own rows no Tally covers.
	Count bool
	// Never are the ids that bad input carried, by its kind: none has a
	// row.
	Never map[uuid.UUID]string
	// Kept are rows written inside the horizon before the run: a purge
	// must keep them; KeptAge says how old (for problems).
	Kept    []uuid.UUID
	KeptAge string
	// Purged are rows written beyond the horizon before the run: the
	// purges must delete them; PurgedAge says how old.
	Purged    []uuid.UUID
	PurgedAge string
}

// CheckRecorded compares ids, the event ids of a service's processed_event,
// with rec: a good event without a row (lost, or purged inside the
// horizon), a bad input's id with one, a row inside the horizon purged, a
// row beyond it kept, or a row of an event nobody sent are each a problem.
// ids is not modified.
func CheckRecorded(r *Report, rec Recorded, ids map[uuid.UUID]bool) {
	left := make(map[uuid.UUID]bool, len(ids))
	for id := range ids {
		left[id] = true
	}
	var missing []string
	for _, id := range rec.Sent {
		if !left[id] {
			missing = append(missing, id.String())
		} else if rec.Count {
			r.Applied++
		}
		delete(left, id)
	}
	if n := len(missing); n > 0 {
		r.Problem("%s: %d good events have no processed_event row (lost, or purged inside the horizon): %s", rec.DB, n, limit(missing))
		if rec.Count {
			r.Lost += n
		}
	}
	for id, kind := range rec.Never {
		if left[id] {
			r.Problem("bad input %q (event %s) has a processed_event row", kind, id)
		}
	}
	purgedInside := 0
	for _, id := range rec.Kept {
		if !left[id] {
			purgedInside++
		}
		delete(left, id)
	}
	if purgedInside > 0 {
		r.Problem("%s: %d processed_event rows inside the horizon (%s old) were purged", rec.DB, purgedInside, rec.KeptAge)
	}
	keptOld := 0
	for _, id := range rec.Purged {
		if left[id] {
			keptOld++
		}
		delete(left, id)
	}
	if keptOld > 0 {
		r.Problem("%s: %d processed_event rows beyond the horizon (%s old) survived the purges", rec.DB, keptOld, rec.PurgedAge)
	}
	for id := range rec.Never {
		delete(left, id)
	}
	if len(left) > 0 {
		r.Problem("%s: %d processed_event rows of events nobody sent", rec.DB, len(left))
	}
}
