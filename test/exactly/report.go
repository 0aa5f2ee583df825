package exactly

import (
	"fmt"
	"strings"
	"testing"
)

// Report is what the checks found. Fill it through the checks, then call
// Close once. Not safe for concurrent use.
type Report struct {
	// Events is how many distinct good events were sent (the test sets
	// it).
	Events int
	// Applied counts keys applied exactly once (Tally) and events recorded
	// where Recorded counts them.
	Applied int
	// Twice counts keys applied more than once.
	Twice int
	// Lost counts keys never applied (and, where Recorded counts them,
	// good events without a processed_event row).
	Lost int
	// Wrong counts keys applied with the wrong content or left in the
	// wrong final state.
	Wrong int
	// Unexpected counts keys applied that nobody sent.
	Unexpected int
	// BadTotal is how many bad inputs were sent (the test sets it).
	BadTotal int
	// BadQuarantined counts bad inputs found as their row of the failure
	// store with everything right.
	BadQuarantined int
	// FailureRows is how many rows the failure stores held (every state).
	FailureRows int
	// FailureCopies is how many failed copies those rows count (a
	// redelivered or republished failure adds to its row's copies).
	FailureCopies int
	// FailedRows is how many of those rows are in state failed: what
	// ListFailedMessages must list.
	FailedRows int
	// Problems are every rule broken, one sentence each.
	Problems []string

	lost, twice, wrong []string
}

// Problem records a broken rule.
func (r *Report) Problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// Close counts and lists what the checks found lost, applied twice or
// wrong (five of each named, then how many in all). Call it once, after
// the checks.
func (r *Report) Close() {
	r.Lost += len(r.lost)
	r.Twice += len(r.twice)
	r.Wrong += len(r.wrong)
	if len(r.lost) > 0 {
		r.Problem("lost: %s", limit(r.lost))
	}
	if len(r.twice) > 0 {
		r.Problem("applied twice: %s", limit(r.twice))
	}
	if len(r.wrong) > 0 {
		r.Problem("wrong state: %s", limit(r.wrong))
	}
	r.lost, r.twice, r.wrong = nil, nil, nil
}

// OK reports whether no rule was broken: nothing lost, twice, wrong or
// unexpected, and no other problem.
func (r *Report) OK() bool {
	return len(r.Problems) == 0 && r.Lost == 0 && r.Twice == 0 && r.Wrong == 0 && r.Unexpected == 0
}

// Errors fails t with every problem (t.Error: the test goes on).
func (r *Report) Errors(t testing.TB) {
	t.Helper()
	for _, p := range r.Problems {
		t.Error(p)
	}
}

// Summary is the report's counts in one line.
func (r *Report) Summary() string {
	return fmt.Sprintf("events: %d, applied once: %d, applied twice: %d, lost: %d, wrong: %d, unexpected: %d",
		r.Events, r.Applied, r.Twice, r.Lost, r.Wrong, r.Unexpected)
}

// limit joins up to five items, then says how many there were.
func limit(list []string) string {
	if len(list) > 5 {
		return strings.Join(list[:5], "; ") + fmt.Sprintf("; ... (%d in all)", len(list))
	}
	return strings.Join(list, "; ")
}
