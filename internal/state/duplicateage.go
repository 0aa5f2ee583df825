package state

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/platformd/platformd/internal/query"
)

// DuplicateAgeBuckets is the number of buckets of a platform.duplicate_age
// row: bucket 0 counts ages up to 1 s, bucket i (1..184) ages in
// (2^((i-1)/8), 2^(i/8)] seconds, the last every age above 2^23 s (97
// days). Each bucket is about 9% wide, so a percentile read from them is
// within 9% of the truth.
const DuplicateAgeBuckets = 186

// DuplicateAgeBucketBound is the upper bound, in seconds, of bucket i
// (+Inf for the last).
func DuplicateAgeBucketBound(i int) float64 {
	if i >= DuplicateAgeBuckets-1 {
		return math.Inf(1)
	}
	return math.Exp2(float64(i) / 8)
}

// duplicateAgeBucket is the bucket of an age in seconds.
func duplicateAgeBucket(age float64) int {
	if age <= 1 {
		return 0
	}
	i := int(math.Ceil(8 * math.Log2(age)))
	return min(max(i, 0), DuplicateAgeBuckets-1)
}

// DuplicateAgeStats are the duplicate ages of one source over some days.
type DuplicateAgeStats struct {
	// Source is the duplicates' source (metrics.Source…).
	Source string
	// Count is how many duplicates were seen.
	Count int64
	// MaxAge is the oldest age seen, exact.
	MaxAge time.Duration
	// Buckets are the counts per bucket (DuplicateAgeBucketBound).
	Buckets [DuplicateAgeBuckets]int64
}

// Quantile returns the age under which a fraction q (0..1) of the
// duplicates fall, read from the buckets: the upper bound of the bucket
// holding that rank, never above MaxAge; 0 when there were none.
func (s *DuplicateAgeStats) Quantile(q float64) time.Duration {
	if s.Count == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(s.Count)))
	rank = max(rank, 1)
	var seen int64
	for i, n := range s.Buckets {
		seen += n
		if seen >= rank {
			b := DuplicateAgeBucketBound(i)
			if math.IsInf(b, 1) || time.Duration(b*float64(time.Second)) > s.MaxAge {
				return s.MaxAge
			}
			return time.Duration(b * float64(time.Second))
		}
	}
	return s.MaxAge
}

// add adds o to s (same source).
func (s *DuplicateAgeStats) add(count int64, maxAge time.Duration, buckets []int64) {
	s.Count += count
	s.MaxAge = max(s.MaxAge, maxAge)
	for i, n := range buckets {
		if i < DuplicateAgeBuckets {
			s.Buckets[i] += n
		}
	}
}

// duplicateAgeKey is a rollup row's key, the pool aside.
type duplicateAgeKey struct {
	day    time.Time // a UTC midnight
	source string
}

// duplicateAgeCell is a rollup row's counts not yet written.
type duplicateAgeCell struct {
	count   int64
	maxAge  float64 // seconds
	buckets [DuplicateAgeBuckets]int64
}

// DuplicateAges accumulates one pool's duplicate ages in memory until
// Flush adds them to platform.duplicate_age, so that the duplicate path
// costs no statement. The zero value is not usable: see NewDuplicateAges.
// It is safe for concurrent use.
type DuplicateAges struct {
	pool string

	mu      sync.Mutex
	pending map[duplicateAgeKey]*duplicateAgeCell
	// writing holds what a Flush in progress is writing, so that Pending
	// still sees it until it is committed.
	writing map[duplicateAgeKey]*duplicateAgeCell
	flushMu sync.Mutex // one Flush at a time
}

// NewDuplicateAges returns an empty accumulator for pool.
func NewDuplicateAges(pool string) *DuplicateAges {
	return &DuplicateAges{pool: pool, pending: map[duplicateAgeKey]*duplicateAgeCell{}}
}

// DuplicateAge is one duplicate's age, as noted by the pool that skipped
// it.
type DuplicateAge struct {
	// Source is metrics.Source….
	Source string
	// At is when it was skipped.
	At time.Time
	// Age is At minus the event's time.
	Age time.Duration
}

// Add notes ages, under one lock. It reports whether anything was noted.
func (a *DuplicateAges) Add(ages []DuplicateAge) bool {
	if len(ages) == 0 {
		return false
	}
	var (
		lastAt time.Time
		day    time.Time
	)
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, d := range ages {
		if !d.At.Equal(lastAt) || day.IsZero() { // a batch's ages share one skip time
			at := d.At.UTC()
			lastAt, day = d.At, time.Date(at.Year(), at.Month(), at.Day(), 0, 0, 0, 0, time.UTC)
		}
		k := duplicateAgeKey{day: day, source: d.Source}
		c := a.pending[k]
		if c == nil {
			c = &duplicateAgeCell{}
			a.pending[k] = c
		}
		sec := max(d.Age.Seconds(), 0)
		c.count++
		c.maxAge = max(c.maxAge, sec)
		c.buckets[duplicateAgeBucket(sec)]++
	}
	return true
}

// duplicateAgeRow is one row of the upsert's JSON.
type duplicateAgeRow struct {
	Day     string  `json:"day"`
	Source  string  `json:"source"`
	Count   int64   `json:"count"`
	MaxAge  float64 `json:"max_age_seconds"`
	Buckets []int64 `json:"buckets"`
}

// Flush adds what was noted since the last Flush to platform.duplicate_age
// in one statement (nothing when nothing was noted). On an error what it
// tried to write is kept for the next Flush.
func (a *DuplicateAges) Flush(ctx context.Context, db query.Querier) error {
	a.flushMu.Lock()
	defer a.flushMu.Unlock()
	a.mu.Lock()
	batch := a.pending
	if len(batch) == 0 {
		a.mu.Unlock()
		return nil
	}
	a.pending, a.writing = map[duplicateAgeKey]*duplicateAgeCell{}, batch
	a.mu.Unlock()
	rows := make([]duplicateAgeRow, 0, len(batch))
	for k, c := range batch {
		rows = append(rows, duplicateAgeRow{Day: k.day.Format(time.DateOnly), Source: k.source, Count: c.count, MaxAge: c.maxAge, Buckets: c.buckets[:]})
	}
	body, err := json.Marshal(rows)
	if err == nil {
		_, err = upsertDuplicateAge.Run(ctx, db, upsertDuplicateAgeParams{Pool: a.pool, Rows: body})
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.writing = nil
	if err != nil {
		for k, c := range batch { // keep them for the next flush
			p := a.pending[k]
			if p == nil {
				a.pending[k] = c
				continue
			}
			p.count += c.count
			p.maxAge = max(p.maxAge, c.maxAge)
			for i, n := range c.buckets {
				p.buckets[i] += n
			}
		}
		return fmt.Errorf("state: flush duplicate ages of pool %s: %w", a.pool, err)
	}
	return nil
}

// Pending returns, by source, what was noted on or after since (a day,
// UTC) and is not yet committed to platform.duplicate_age.
func (a *DuplicateAges) Pending(since time.Time) map[string]*DuplicateAgeStats {
	out := map[string]*DuplicateAgeStats{}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range []map[duplicateAgeKey]*duplicateAgeCell{a.pending, a.writing} {
		for k, c := range m {
			if k.day.Before(since) {
				continue
			}
			s := out[k.source]
			if s == nil {
				s = &DuplicateAgeStats{Source: k.source}
				out[k.source] = s
			}
			s.add(c.count, time.Duration(c.maxAge*float64(time.Second)), c.buckets[:])
		}
	}
	return out
}

// MergeDuplicateAges adds from's stats into into, by source.
func MergeDuplicateAges(into, from map[string]*DuplicateAgeStats) {
	for src, s := range from {
		t := into[src]
		if t == nil {
			t = &DuplicateAgeStats{Source: src}
			into[src] = t
		}
		t.add(s.Count, s.MaxAge, s.Buckets[:])
	}
}

// SortedDuplicateAges returns the stats ordered by source name.
func SortedDuplicateAges(m map[string]*DuplicateAgeStats) []DuplicateAgeStats {
	out := make([]DuplicateAgeStats, 0, len(m))
	for _, s := range m {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Source < out[j].Source })
	return out
}

// ReadDuplicateAges returns, by source, the duplicate ages stored in
// platform.duplicate_age for days on or after since (a date, UTC), over
// every pool (pools nil) or the pools named. It is safe for concurrent use.
func ReadDuplicateAges(ctx context.Context, db query.Querier, since time.Time, pools []string) (map[string]*DuplicateAgeStats, error) {
	out := map[string]*DuplicateAgeStats{}
	err := readDuplicateAges.Each(ctx, db, readDuplicateAgesParams{Since: since.UTC().Format(time.DateOnly), Pools: pools},
		func(r duplicateAgeStoredRow) error {
			s := out[r.Source]
			if s == nil {
				s = &DuplicateAgeStats{Source: r.Source}
				out[r.Source] = s
			}
			s.add(r.Count, time.Duration(r.MaxAge*float64(time.Second)), r.Buckets)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("state: read duplicate ages: %w", err)
	}
	return out, nil
}

// OldestDuplicate returns the source and age of the oldest duplicate in
// stats (ok false when there is none).
func OldestDuplicate(stats map[string]*DuplicateAgeStats) (source string, age time.Duration, ok bool) {
	for _, s := range SortedDuplicateAges(stats) {
		if s.Count > 0 && (!ok || s.MaxAge > age) {
			source, age, ok = s.Source, s.MaxAge, true
		}
	}
	return source, age, ok
}
