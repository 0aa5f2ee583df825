package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/query"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/dbpool"
)

// States of a replay, as platform.replay stores them.
const (
	StateDryRun    = "dry_run"
	StateRunning   = "running"
	StateDone      = "done"
	StateCancelled = "cancelled"
	StateFailed    = "failed"
)

// RateDefault is a replay's pace when the request names none (messages/s).
const RateDefault = 500

// RateMax is the highest pace a replay may ask for.
const RateMax = 100_000

// ErrInvalid is a request refused as malformed; ErrNotFound an unknown
// replay. Their text names the field.
var (
	ErrInvalid  = errors.New("invalid replay request")
	ErrNotFound = errors.New("replay not found")
)

// Selection is what a replay takes from the archive: events whose name
// matches one of EventNames (names or topic patterns; none: every name),
// and whose occurred_at is in [From, To) (zero: open) or whose id is one
// of EventIDs.
type Selection struct {
	EventNames []string    `json:"event_names,omitempty"`
	From       time.Time   `json:"from,omitzero"`
	To         time.Time   `json:"to,omitzero"`
	EventIDs   []uuid.UUID `json:"event_ids,omitempty"`
}

// Check validates s: at least a range bound or ids (not both), from before
// to, valid patterns. Errors wrap ErrInvalid and name the field.
func (s Selection) Check() error {
	for i, p := range s.EventNames {
		if why := config.CheckTopicPattern(p); why != "" {
			return fmt.Errorf("%w: event_names[%d]: %s", ErrInvalid, i, why)
		}
	}
	hasRange := !s.From.IsZero() || !s.To.IsZero()
	switch {
	case hasRange && len(s.EventIDs) > 0:
		return fmt.Errorf("%w: from/to and event_ids: give one or the other", ErrInvalid)
	case !hasRange && len(s.EventIDs) == 0:
		return fmt.Errorf("%w: from/to or event_ids: the selection is empty (give an occurred_at range or event ids)", ErrInvalid)
	case !s.From.IsZero() && !s.To.IsZero() && !s.From.Before(s.To):
		return fmt.Errorf("%w: from: %s is not before to (%s)", ErrInvalid, s.From.UTC().Format(time.RFC3339Nano), s.To.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// Item is one selected archived event.
type Item struct {
	ID         uuid.UUID
	Name       string
	OccurredAt time.Time
}

// Select reads the events s matches from the producer's archive, among
// those published within the last keep, in event_id order, and for each
// of s's names how many events it matched.
func Select(ctx context.Context, db query.Querier, s Selection, keep time.Duration) ([]Item, []int, error) {
	ids := make([][16]byte, len(s.EventIDs))
	for i, id := range s.EventIDs {
		ids[i] = id
	}
	var items []Item
	perName := make([]int, len(s.EventNames))
	known := map[string][]int{} // name -> indexes of the patterns matching it
	interned := map[string]string{}
	params := selectParams{From: timeOrNil(s.From), To: timeOrNil(s.To), IDs: ids, KeepSecs: keep.Seconds()}
	err := selectArchived.Each(ctx, db, params, func(row itemRow) error {
		it := Item{ID: row.ID, Name: row.Name, OccurredAt: row.OccurredAt}
		m, ok := known[it.Name]
		if !ok {
			m = []int{}
			for i, p := range s.EventNames {
				if config.TopicMatch(p, it.Name) {
					m = append(m, i)
				}
			}
			known[it.Name] = m
		}
		if len(s.EventNames) > 0 && len(m) == 0 {
			return nil
		}
		for _, i := range m {
			perName[i]++
		}
		if n, ok := interned[it.Name]; ok {
			it.Name = n // a million items share a few strings
		} else {
			interned[it.Name] = it.Name
		}
		items = append(items, it)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("replay: select archived events: %w", err)
	}
	return items, perName, nil
}

func timeOrNil(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// Target is a pool a replay reaches, and what the dry run and the runner
// need of its service.
type Target struct {
	// Pool, Service and Queue name the pool.
	Pool, Service, Queue string
	// Bindings are the pool's binding keys.
	Bindings []string
	// DB is the service's database; only read.
	DB dbpool.DB
	// Horizon is the service's horizon in force (0: none).
	Horizon time.Duration
	// Quarantine is true when the service quarantines events beyond its
	// horizon (beyond_horizon: quarantine).
	Quarantine bool
}

// Receives reports whether the pool is bound to name.
func (t Target) Receives(name string) bool {
	for _, b := range t.Bindings {
		if config.TopicMatch(b, name) {
			return true
		}
	}
	return false
}

// beyond reports whether the guard of t quarantines an event of this
// time, judged at now.
func (t Target) beyond(at, now time.Time) bool {
	return t.Quarantine && t.Horizon > 0 && now.Sub(at) > t.Horizon
}

// PoolCount is what a replay does, or would do, to one target pool.
type PoolCount struct {
	Pool             string `json:"pool"`
	Service          string `json:"service"`
	WouldApply       int64  `json:"would_apply"`
	AlreadyProcessed int64  `json:"already_processed"`
	BeyondHorizon    int64  `json:"beyond_horizon"`
	Published        int64  `json:"published"`
}

// DryRun counts, for each target, the items it receives (all of them for
// a targeted replay) that a copy would apply, skip as already processed,
// or quarantine as beyond its horizon (judged at now: the guard runs
// before the dedup step, so an event beyond the horizon counts there even
// when its row is still in processed_event). Each target costs one query
// against its service's processed_event.
func DryRun(ctx context.Context, items []Item, targets []Target, targeted bool, now time.Time) ([]PoolCount, error) {
	out := make([]PoolCount, len(targets))
	errs := make([]error, len(targets))
	sem := make(chan struct{}, dryRunParallel)
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i], errs[i] = dryRunOne(ctx, items, t, targeted, now)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b PoolCount) int {
		return cmpOr(strings.Compare(a.Service, b.Service), strings.Compare(a.Pool, b.Pool))
	})
	return out, nil
}

// dryRunParallel bounds the targets counted at once (each its own
// database query).
const dryRunParallel = 4

// dryRunOne is DryRun for one target.
func dryRunOne(ctx context.Context, items []Item, t Target, targeted bool, now time.Time) (PoolCount, error) {
	pc := PoolCount{Pool: t.Pool, Service: t.Service}
	ids := make([][16]byte, 0, len(items))
	receives := map[string]bool{} // by name: a few names for a million items
	for _, it := range items {
		if !targeted {
			r, ok := receives[it.Name]
			if !ok {
				r = t.Receives(it.Name)
				receives[it.Name] = r
			}
			if !r {
				continue
			}
		}
		if t.beyond(envelope.EventTime(it.ID, it.OccurredAt), now) {
			pc.BeyondHorizon++
			continue
		}
		ids = append(ids, it.ID)
	}
	if len(ids) > 0 {
		// A read-only transaction: the services' databases are read, never
		// written, and PostgreSQL holds the dry run to it.
		err := pgx.BeginTxFunc(ctx, t.DB, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			var err error
			pc.AlreadyProcessed, err = countProcessed.One(ctx, tx, idsParams{IDs: ids})
			return err
		})
		if err != nil {
			return pc, fmt.Errorf("replay: count processed events of %s: %w", t.Service, err)
		}
	}
	pc.WouldApply = int64(len(ids)) - pc.AlreadyProcessed
	return pc, nil
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// Targets returns the pools among all that receive at least one of the
// items' names by their bindings.
func Targets(items []Item, all []Target) []Target {
	names := map[string]bool{}
	for _, it := range items {
		names[it.Name] = true
	}
	var out []Target
	for _, t := range all {
		for n := range names {
			if t.Receives(n) {
				out = append(out, t)
				break
			}
		}
	}
	return out
}
