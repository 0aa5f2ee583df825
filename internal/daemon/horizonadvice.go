package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/state"
)

// Horizon advice's rules (docs/operations.md, "Tuning a horizon").
const (
	// horizonGuardWindow is how far back SetHorizon looks for the oldest
	// duplicate a new horizon must cover.
	horizonGuardWindow = 30 * 24 * time.Hour
	// exactCountBelow is the planner's estimate under which
	// processed_event's rows are counted exactly.
	exactCountBelow = 100_000
	// adviceMarginFactor and adviceMarginMin are the margin above the
	// oldest duplicate: the greater of 20% and an hour.
	adviceMarginFactor = 1.2
	adviceMarginMin    = time.Hour
	// archiveMargin covers the delay between an event's time and its
	// archiving (the archive counts from published_at).
	archiveMargin = 24 * time.Hour
	day           = 24 * time.Hour
)

// AdviseHorizon implements admin.HorizonAdvisor: the duplicates the
// service's pools saw (stored by every daemon, plus what this daemon's
// pools have not written yet), its beyond_horizon failures, the archives
// of the producers this daemon hosts whose events its pools' bindings
// match, and processed_event's cost.
func (b *backend) AdviseHorizon(ctx context.Context, name string, window time.Duration, ignoreArchive bool) (admin.HorizonAdvice, error) {
	s, err := b.service(name)
	if err != nil {
		return admin.HorizonAdvice{}, err
	}
	c := s.config()
	h, err := b.GetHorizon(ctx, name)
	if err != nil {
		return admin.HorizonAdvice{}, err
	}
	a := admin.HorizonAdvice{Service: name, Window: window, Horizon: h.Horizon, MinHorizon: c.MinHorizon}
	ages, err := s.duplicateAges(ctx, window)
	if err != nil {
		return admin.HorizonAdvice{}, unavailable(err)
	}
	for _, st := range state.SortedDuplicateAges(ages) {
		a.Sources = append(a.Sources, admin.DuplicateAgeSource{Source: st.Source, Count: st.Count,
			P99: st.Quantile(0.99), P999: st.Quantile(0.999), Max: st.MaxAge})
	}
	if a.BeyondHorizon, err = countBeyondHorizon.One(ctx, s.db, sinceParams{Since: time.Now().Add(-window)}); err != nil {
		return admin.HorizonAdvice{}, unavailable(err)
	}
	a.Archives = b.archivesReaching(ctx, c)
	if err := processedEventCost(ctx, s, &a); err != nil {
		return admin.HorizonAdvice{}, unavailable(err)
	}
	advise(&a, c, ages, ignoreArchive)
	return a, nil
}

// duplicateAges returns the service's duplicate ages by source over the
// days of window (UTC), its pools' stored rows and this daemon's pools'
// ages not yet written.
func (s *service) duplicateAges(ctx context.Context, window time.Duration) (map[string]*state.DuplicateAgeStats, error) {
	since := time.Now().UTC().Add(-window).Truncate(day)
	c := s.config()
	pools := make([]string, 0, len(c.Pools))
	for _, p := range c.Pools {
		pools = append(pools, p.Name)
	}
	ages, err := state.ReadDuplicateAges(ctx, s.db, since, pools)
	if err != nil {
		return nil, err
	}
	for _, p := range s.workerPools() {
		state.MergeDuplicateAges(ages, p.DuplicateAges().Pending(since))
	}
	return ages, nil
}

// archivesReaching returns the archives of the producers this daemon
// hosts whose archived event names a pool of c is bound to (the replay's
// topic matching), longest first. A producer whose database does not
// answer is left out, and logged.
func (b *backend) archivesReaching(ctx context.Context, c config.ServiceConfig) []admin.ArchiveReach {
	var out []admin.ArchiveReach
	for _, p := range b.d.serviceList() {
		pc := p.config()
		if pc.Outbox.Archive <= 0 {
			continue
		}
		names, err := archivedEventNames.All(ctx, p.db, struct{}{})
		if err != nil {
			b.d.log.WarnContext(ctx, "daemon: horizon advice: read producer's archived event names",
				slog.String("producer", p.name), slog.Any("error", err))
			continue
		}
		var pools []string
		for _, pool := range c.Pools {
			if slices.ContainsFunc(names, func(n string) bool { return bindsTo(pool.Bindings, n) }) {
				pools = append(pools, pool.Name)
			}
		}
		if len(pools) > 0 {
			out = append(out, admin.ArchiveReach{Producer: p.name, Archive: pc.Outbox.Archive, Pools: pools})
		}
	}
	slices.SortFunc(out, func(x, y admin.ArchiveReach) int {
		if x.Archive != y.Archive {
			return int(y.Archive - x.Archive)
		}
		return cmpString(x.Producer, y.Producer)
	})
	return out
}

func cmpString(x, y string) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// bindsTo reports whether one of bindings matches the routing key name.
func bindsTo(bindings []string, name string) bool {
	return slices.ContainsFunc(bindings, func(b string) bool { return config.TopicMatch(b, name) })
}

// processedEventCost fills a's processed_event rows, bytes and rows per
// day. Rows are the planner's estimate, counted exactly when it is
// missing (never analysed) or under exactCountBelow; rows per day divide
// them by the days they span (at least one).
func processedEventCost(ctx context.Context, s *service, a *admin.HorizonAdvice) error {
	rows, err := dedup.EstimateRows(ctx, s.db)
	if err != nil {
		return err
	}
	if rows < exactCountBelow {
		if rows, err = processedEventCount.One(ctx, s.db, struct{}{}); err != nil {
			return err
		}
	}
	if a.ProcessedEventBytes, err = processedEventSize.One(ctx, s.db, struct{}{}); err != nil {
		return err
	}
	span, err := processedEventSpan.One(ctx, s.db, struct{}{})
	if err != nil {
		return err
	}
	a.ProcessedEventRows = rows
	a.RowsPerDay = float64(rows) / max(span/day.Seconds(), 1)
	return nil
}

// advise sets a's advised horizon, its cost and the reasons.
func advise(a *admin.HorizonAdvice, c config.ServiceConfig, ages map[string]*state.DuplicateAgeStats, ignoreArchive bool) {
	var floor time.Duration // what the pools' retries need: SetHorizon refuses less
	for _, p := range c.Pools {
		floor = max(floor, p.RetrySpan()+time.Hour)
	}
	advised := max(c.MinHorizon, floor)
	if src, oldest, ok := state.OldestDuplicate(ages); ok {
		covers := max(time.Duration(float64(oldest)*adviceMarginFactor), oldest+adviceMarginMin)
		advised = max(advised, covers)
		a.Reasons = append(a.Reasons, fmt.Sprintf("The oldest duplicate in the last %s was a %s %s old: a horizon of %s covers it with a margin.",
			days(a.Window), src, roundAge(oldest), days(roundUpDay(covers))))
		if oldest > a.Horizon {
			a.Reasons = append(a.Reasons, fmt.Sprintf("That duplicate was older than the horizon of %s: had its processed_event row been purged, it would have been applied twice or quarantined; raise the horizon.",
				days(a.Horizon)))
		}
	} else {
		a.Reasons = append(a.Reasons, fmt.Sprintf("No duplicate was seen in the last %s: the advice rests on min_horizon, the retries and the archives only.", days(a.Window)))
	}
	for _, r := range a.Archives {
		need := r.Archive + archiveMargin
		switch {
		case ignoreArchive && r.Archive > a.Horizon:
			a.Reasons = append(a.Reasons, fmt.Sprintf("Producer %s archives %s, %s more than the horizon of %s, left out as asked: replay its events no further back than %s, or they are quarantined as beyond_horizon.",
				r.Producer, days(r.Archive), days(r.Archive-a.Horizon), days(a.Horizon), days(a.Horizon)))
		case ignoreArchive:
		case r.Archive >= a.Horizon:
			advised = max(advised, need)
			a.Reasons = append(a.Reasons, fmt.Sprintf("Producer %s archives %s of events that reach pools %v, %s more than the horizon of %s: a replay of the oldest would find no processed_event row and be quarantined as beyond_horizon; raise the horizon to %s, or replay no further back than %s.",
				r.Producer, days(r.Archive), r.Pools, days(r.Archive-a.Horizon), days(a.Horizon), days(roundUpDay(need)), days(a.Horizon)))
		default:
			advised = max(advised, need)
			a.Reasons = append(a.Reasons, fmt.Sprintf("Producer %s archives %s of events that reach pools %v: the horizon must stay above %s for a replay of its whole archive.",
				r.Producer, days(r.Archive), r.Pools, days(r.Archive)))
		}
	}
	if a.BeyondHorizon > 0 {
		a.Reasons = append(a.Reasons, fmt.Sprintf("%d events were quarantined as beyond_horizon in the last %s: they arrived older than the horizon; see `platformctl failures list --reason beyond_horizon` before shortening it.",
			a.BeyondHorizon, days(a.Window)))
	}
	if advised == c.MinHorizon && c.MinHorizon > 0 {
		a.Reasons = append(a.Reasons, fmt.Sprintf("min_horizon is %s: the advice never goes under it.", days(c.MinHorizon)))
	}
	a.Advised = roundUpDay(advised)
	advisedDays := a.Advised.Hours() / 24
	a.AdvisedRows = int64(math.Round(a.RowsPerDay * advisedDays))
	if a.ProcessedEventRows > 0 {
		a.AdvisedBytes = int64(math.Round(float64(a.ProcessedEventBytes) / float64(a.ProcessedEventRows) * float64(a.AdvisedRows)))
	}
	a.Reasons = append(a.Reasons, fmt.Sprintf("At %.0f rows a day, a horizon of %s keeps about %d rows (%s) in processed_event; it holds %d rows (%s) now.",
		a.RowsPerDay, days(a.Advised), a.AdvisedRows, admin.BytesText(a.AdvisedBytes), a.ProcessedEventRows, admin.BytesText(a.ProcessedEventBytes)))
}

// roundUpDay rounds d up to whole days (a horizon an operator types).
func roundUpDay(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return ((d + day - 1) / day) * day
}

// days writes d in days when it is whole days, else as a duration.
func days(d time.Duration) string {
	switch {
	case d == day:
		return "1 day"
	case d > 0 && d%day == 0:
		return fmt.Sprintf("%d days", d/day)
	}
	return d.String()
}

// roundAge writes an age to the second.
func roundAge(d time.Duration) string { return d.Round(time.Second).String() }

// checkDuplicateAge refuses, unless force, a horizon under the oldest
// duplicate age the service saw in the last 30 days, naming it and its
// source; with force (or no such duplicate) it returns the audit detail
// to add (nil when nothing to add).
func (s *service) checkDuplicateAge(ctx context.Context, horizon time.Duration, force bool) (map[string]any, error) {
	ages, err := s.duplicateAges(ctx, horizonGuardWindow)
	if err != nil {
		return nil, unavailable(err)
	}
	src, oldest, ok := state.OldestDuplicate(ages)
	if !ok || horizon >= oldest {
		return nil, nil
	}
	if !force {
		return nil, fmt.Errorf("%w: horizon %s is under the oldest duplicate %s saw in the last 30 days, a %s %s old; a shorter horizon would let such a copy apply twice; use force to set it anyway",
			admin.ErrFailedPrecondition, horizon, s.name, src, roundAge(oldest))
	}
	return map[string]any{"under_duplicate_age": oldest.String(), "duplicate_source": src}, nil
}
