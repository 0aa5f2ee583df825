package admintest

import (
	"context"
	"time"

	"github.com/platformd/platformd/internal/admin"
)

// AdviseHorizon implements admin.Backend: every known service has seen
// redeliveries (max 30 s) and replays (max 3 days), and the producer
// "order" archives 720h into its pools, so the advice is 30 days and a
// little (31 days unless ignoreArchive: then 4 days).
func (b *Backend) AdviseHorizon(ctx context.Context, service string, window time.Duration, ignoreArchive bool) (admin.HorizonAdvice, error) {
	if err := b.begin(ctx, Call{Method: "AdviseHorizon", Service: service, Horizon: window, Force: ignoreArchive}); err != nil {
		return admin.HorizonAdvice{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	i, err := b.service(service)
	if err != nil {
		return admin.HorizonAdvice{}, err
	}
	s := b.services[i]
	day := 24 * time.Hour
	a := admin.HorizonAdvice{
		Service: service, Window: window, Horizon: s.Horizon, MinHorizon: s.MinHorizon,
		Sources: []admin.DuplicateAgeSource{
			{Source: "redelivery", Count: 120, P99: 20 * time.Second, P999: 28 * time.Second, Max: 30 * time.Second},
			{Source: "replay", Count: 3, P99: 3 * day, P999: 3 * day, Max: 3 * day},
		},
		BeyondHorizon:      2,
		Archives:           []admin.ArchiveReach{{Producer: "order", Archive: 30 * day, Pools: []string{service + "-events"}}},
		ProcessedEventRows: 1400000, ProcessedEventBytes: 140 << 20, RowsPerDay: 100000,
		Advised: 31 * day, AdvisedRows: 3100000, AdvisedBytes: 310 << 20,
		Reasons: []string{"The archive of producer order keeps 30 days, 16 days more than the horizon of 14 days: a replay of its oldest events would find no processed_event row; raise the horizon to 31 days, or replay no further back than 14 days."},
	}
	if ignoreArchive {
		a.Advised, a.AdvisedRows, a.AdvisedBytes = 4*day, 400000, 40<<20
		a.Reasons = []string{"The oldest duplicate in the window, a replay, was 3 days old: 4 days covers it with a margin."}
	}
	return a, nil
}
