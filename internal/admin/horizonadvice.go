package admin

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
)

// AdviseHorizon's window (docs/operations.md, "Tuning a horizon").
const (
	// AdviseWindowDefault is the window AdviseHorizon reads when none is
	// given.
	AdviseWindowDefault = 30 * 24 * time.Hour
	// AdviseWindowMax is the longest window AdviseHorizon accepts.
	AdviseWindowMax = 366 * 24 * time.Hour
)

// HorizonAdvisor is the part of the Backend that advises horizons.
type HorizonAdvisor interface {
	// AdviseHorizon returns service's horizon advice from the evidence of
	// the last window (positive, at most AdviseWindowMax); ignoreArchive
	// leaves the producers' archives out of the advised horizon. An
	// unknown service is ErrNotFound.
	AdviseHorizon(ctx context.Context, service string, window time.Duration, ignoreArchive bool) (HorizonAdvice, error)
}

// HorizonAdvice is what a service has seen and the horizon it advises
// (the proto's HorizonAdvice).
type HorizonAdvice struct {
	Service string
	Window  time.Duration
	// Sources are the duplicate ages by source, ordered by source.
	Sources []DuplicateAgeSource
	// BeyondHorizon counts the beyond_horizon failures in the window.
	BeyondHorizon int64
	// Archives are the producers' archives that reach the service's pools.
	Archives []ArchiveReach
	// ProcessedEventRows and ProcessedEventBytes are processed_event's
	// size now; RowsPerDay what it gains a day.
	ProcessedEventRows  int64
	ProcessedEventBytes int64
	RowsPerDay          float64
	// Horizon is the horizon in force, MinHorizon the configured floor.
	Horizon, MinHorizon time.Duration
	// Advised is the advised horizon; AdvisedRows and AdvisedBytes its
	// cost in processed_event.
	Advised      time.Duration
	AdvisedRows  int64
	AdvisedBytes int64
	// Reasons explain the advice, one sentence each.
	Reasons []string
}

// DuplicateAgeSource is the age of one source's duplicates in a window.
type DuplicateAgeSource struct {
	Source         string
	Count          int64
	P99, P999, Max time.Duration
}

// ArchiveReach is a producer's archive that reaches a service's pools.
type ArchiveReach struct {
	Producer string
	Archive  time.Duration
	Pools    []string
}

// adviseWindow checks AdviseHorizon's window and applies its default.
func adviseWindow(d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return AdviseWindowDefault, nil
	}
	w, err := positiveDuration("window", d)
	if err != nil {
		return 0, err
	}
	if w > AdviseWindowMax {
		return 0, invalid("window %v is over a year, at most %v", w, AdviseWindowMax)
	}
	return w, nil
}

// AdviseHorizon implements AdminService.AdviseHorizon.
func (s *Server) AdviseHorizon(ctx context.Context, req *adminv1.AdviseHorizonRequest) (*adminv1.AdviseHorizonResponse, error) {
	if err := requireName("service", req.GetService()); err != nil {
		return nil, err
	}
	window, err := adviseWindow(req.GetWindow())
	if err != nil {
		return nil, err
	}
	a, err := s.backend.AdviseHorizon(ctx, req.GetService(), window, req.GetIgnoreArchive())
	if err != nil {
		return nil, s.toStatus(ctx, "AdviseHorizon", err)
	}
	return &adminv1.AdviseHorizonResponse{Advice: HorizonAdviceToProto(a)}, nil
}

// HorizonAdviceToProto converts a HorizonAdvice (platformctl's tests and
// the console use it too).
func HorizonAdviceToProto(a HorizonAdvice) *adminv1.HorizonAdvice {
	out := &adminv1.HorizonAdvice{
		Service: a.Service, Window: durationpb.New(a.Window), BeyondHorizon: a.BeyondHorizon,
		ProcessedEventRows: a.ProcessedEventRows, ProcessedEventBytes: a.ProcessedEventBytes, RowsPerDay: a.RowsPerDay,
		Horizon: durationpb.New(a.Horizon), MinHorizon: durationpb.New(a.MinHorizon), Advised: durationpb.New(a.Advised),
		AdvisedRows: a.AdvisedRows, AdvisedBytes: a.AdvisedBytes, Reasons: a.Reasons,
	}
	for _, s := range a.Sources {
		out.Sources = append(out.Sources, &adminv1.DuplicateAgeSource{Source: s.Source, Count: s.Count,
			P99: durationpb.New(s.P99), P999: durationpb.New(s.P999), Max: durationpb.New(s.Max)})
	}
	for _, r := range a.Archives {
		out.Archives = append(out.Archives, &adminv1.ArchiveReach{Producer: r.Producer, Archive: durationpb.New(r.Archive), Pools: r.Pools})
	}
	return out
}

// BytesText writes n bytes in binary units (512 B, 1.5 KiB, 3.2 GiB): the
// advice's sizes as its reasons and the console show them.
func BytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
