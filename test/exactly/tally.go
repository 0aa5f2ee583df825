package exactly

import "fmt"

// Want is what one key shows once its event is applied exactly once.
type Want struct {
	// Rows is how many rows one application writes (0 means 1).
	Rows int
	// Sum is a checksum of their content (say, quantities in
	// thousandths), compared with Count.Sum; 0 when unused.
	Sum int64
	// Label names the key in problems (default: the key itself).
	Label string
}

// Count is what was found for one key.
type Count struct {
	// Rows is how many rows the key has, or how many times it was applied.
	Rows int
	// Sum is the checksum of their content, as Want.Sum.
	Sum int64
}

// Ledger is what Tally compares.
type Ledger[K comparable] struct {
	// What names the rows in problems, e.g. "reservation".
	What string
	// Want holds every key sent.
	Want map[K]Want
	// Got holds every key found.
	Got map[K]Count
	// Forbidden are keys of bad input, by their kind: none may be found.
	Forbidden map[K]string
}

// Once is the Want of events each applied once, writing one row.
func Once[K comparable](keys []K) map[K]Want {
	w := make(map[K]Want, len(keys))
	for _, k := range keys {
		w[k] = Want{Rows: 1}
	}
	return w
}

// Tally compares l.Want with l.Got, key by key: a key not found is lost;
// more rows than wanted is applied twice; fewer, or another Sum, is wrong;
// as wanted counts as applied. A key found that nobody sent is unexpected,
// and a forbidden one is a problem of its own. l.Got is not modified.
func Tally[K comparable](r *Report, l Ledger[K]) {
	got := make(map[K]Count, len(l.Got))
	for k, c := range l.Got {
		got[k] = c
	}
	for k, w := range l.Want {
		rows := max(w.Rows, 1)
		label := w.Label
		if label == "" {
			label = fmt.Sprint(k)
		}
		x, ok := got[k]
		switch {
		case !ok:
			r.lost = append(r.lost, l.What+" "+label)
		case x.Rows > rows:
			r.twice = append(r.twice, fmt.Sprintf("%s %s: %d rows for %d", l.What, label, x.Rows, rows))
		case x.Rows < rows || x.Sum != w.Sum:
			r.wrong = append(r.wrong, fmt.Sprintf("%s %s: %d rows, sum %d; want %d, %d", l.What, label, x.Rows, x.Sum, rows, w.Sum))
		default:
			r.Applied++
		}
		delete(got, k)
	}
	for k, x := range got {
		r.Unexpected++
		r.Problem("%s of a key nobody sent (a bad input applied?): %v, %d rows", l.What, k, x.Rows)
	}
	for k, kind := range l.Forbidden {
		if _, ok := got[k]; ok {
			r.Problem("bad input %q was applied (%s %v)", kind, l.What, k)
		}
	}
}

// Final compares the state each key was left in (want: what its last
// event sets) with what was found: a key missing or in another state is
// wrong; a key found that nobody sent is unexpected.
func Final[K, V comparable](r *Report, what string, want, got map[K]V) {
	seen := make(map[K]bool, len(want))
	for k, w := range want {
		seen[k] = true
		g, ok := got[k]
		switch {
		case !ok:
			r.wrong = append(r.wrong, fmt.Sprintf("%s %v: no row", what, k))
		case g != w:
			r.wrong = append(r.wrong, fmt.Sprintf("%s %v: %v, want %v", what, k, g, w))
		}
	}
	for k := range got {
		if !seen[k] {
			r.Unexpected++
			r.Problem("%s of a key nobody sent (a bad input applied?): %v", what, k)
		}
	}
}
