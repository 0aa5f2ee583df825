package exactly

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
)

// StateFailed is the state of a failure left for an operator, the state a
// bad input's row must end in.
const StateFailed = "failed"

// Bad is one bad input sent: it must end as one row of its pool's failure
// store (platform.failed_event of its service database).
type Bad struct {
	// Kind names it in problems.
	Kind string
	// Body is what was published (it identifies the row: the store keeps
	// the body byte for byte).
	Body []byte
	// DB is the service database whose failure store must hold it ("":
	// any of those read).
	DB string
	// Pool is the pool's name (column pool).
	Pool string
	// Reason is the failure reason wanted (column reason).
	Reason string
	// RoutingKey is what it was published with (column routing_key).
	RoutingKey string
}

// Failed is one row of a service database's failure store, as ReadFailed
// reads it.
type Failed struct {
	// DB is the service database it was read from.
	DB                      string
	Pool                    string
	EventID                 *uuid.UUID // nil when the body did not decode
	RoutingKey              string
	Body                    []byte
	Reason, Error, State    string
	Attempt, Copies         int
	FirstFailedAt, FailedAt time.Time
}

// Quarantined checks the failure stores' rows (rows, every one read)
// against bad: each bad input is there as one row (its redelivered or
// republished copies add to copies, never a second row), in its database
// and pool, in state failed, with its reason and routing key, its body
// byte for byte, a non-empty error carrying no secret and its times set; a
// good event (goods) or an unknown row there is a problem. It sets
// FailureRows, FailureCopies and StateFailed and counts BadQuarantined.
func Quarantined(r *Report, bad []Bad, rows []Failed, goods map[uuid.UUID]bool, secrets []string) {
	r.FailureRows = len(rows)
	r.FailureCopies, r.FailedRows = 0, 0
	byBody := map[string]int{}
	for i, b := range bad {
		byBody[string(b.Body)] = i
	}
	seen := make([]int, len(bad))
	for _, m := range rows {
		r.FailureCopies += m.Copies
		if m.State == StateFailed {
			r.FailedRows++
		}
		i, ok := byBody[string(m.Body)]
		if !ok {
			id := m.EventID
			if id == nil {
				var w struct {
					EventID string `json:"event_id"`
				}
				_ = json.Unmarshal(m.Body, &w)
				if u, err := uuid.Parse(w.EventID); err == nil {
					id = &u
				}
			}
			if id != nil && goods[*id] {
				r.Problem("good event %s in the failure store of %s (pool %s): reason %s, state %s, error %s", *id, m.DB, m.Pool, m.Reason, m.State, m.Error)
			} else {
				r.Problem("unknown failure in the failure store of %s (pool %s, %d bytes): reason %s, state %s", m.DB, m.Pool, len(m.Body), m.Reason, m.State)
			}
			continue
		}
		b := bad[i]
		seen[i]++
		if seen[i] == 2 {
			r.Problem("bad input %q stored in more than one row: a copy of a failure adds to its row's copies", b.Kind)
		}
		if p := quarantineProblem(b, m, secrets); p != "" {
			r.Problems = append(r.Problems, p)
		} else if seen[i] == 1 {
			r.BadQuarantined++
		}
	}
	var notFound []string
	for i, b := range bad {
		if seen[i] == 0 {
			notFound = append(notFound, b.Kind)
		}
	}
	slices.Sort(notFound)
	if len(notFound) > 0 {
		r.Problem("bad inputs missing from the failure store: %s", strings.Join(notFound, ", "))
	}
}

// quarantineProblem is what is wrong with bad input b's row m, or "".
func quarantineProblem(b Bad, m Failed, secrets []string) string {
	switch {
	case b.DB != "" && m.DB != b.DB:
		return fmt.Sprintf("bad input %q in the failure store of %s, want %s", b.Kind, m.DB, b.DB)
	case m.Pool != b.Pool:
		return fmt.Sprintf("bad input %q: pool %s, want %s", b.Kind, m.Pool, b.Pool)
	case m.Reason != b.Reason:
		return fmt.Sprintf("bad input %q stored with reason %s (error %s), want %s", b.Kind, m.Reason, m.Error, b.Reason)
	case m.State != StateFailed:
		return fmt.Sprintf("bad input %q in state %s, want %s", b.Kind, m.State, StateFailed)
	case m.RoutingKey != b.RoutingKey:
		return fmt.Sprintf("bad input %q: routing_key %s, want %s", b.Kind, m.RoutingKey, b.RoutingKey)
	case m.Error == "":
		return fmt.Sprintf("bad input %q: empty error", b.Kind)
	case m.Copies < 1:
		return fmt.Sprintf("bad input %q: copies %d", b.Kind, m.Copies)
	case m.FirstFailedAt.IsZero() || m.FailedAt.Before(m.FirstFailedAt):
		return fmt.Sprintf("bad input %q: failed at %s, first failed at %s", b.Kind, m.FailedAt, m.FirstFailedAt)
	}
	for _, sec := range secrets {
		if strings.Contains(m.Error, sec) {
			return fmt.Sprintf("bad input %q: its error carries a secret", b.Kind)
		}
	}
	return ""
}

// Leftovers reports every queue that still holds messages once the
// daemons stopped (failures are rows, not messages): left maps a queue to
// its count.
func Leftovers(r *Report, left map[string]int) {
	for q, n := range left {
		r.Problem("queue %s still holds %d messages after the daemons stopped", q, n)
	}
}
