package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/platformd/platformd/internal/tracing/tracingtest"
)

// The traced contenders: platformd as shipped with traces on, every root
// trace sampled or a tenth of them, exported over OTLP/HTTP (the default
// protocol) to a receiver in the bench process that decodes every export
// as a collector would (its CPU is the bench's, "other" in the table).
const (
	otelContender   = "platformd-otel"
	otel10Contender = "platformd-otel10"
)

// tracingOverheadTargets are the ceilings on the throughput cost of
// tracing, by contender.
var tracingOverheadTargets = map[string]float64{otelContender: 0.10, otel10Contender: 0.03}

func tracedContenders(o *options) []contender {
	return []contender{
		{Name: otelContender, Kind: kindPlatformd, Batch: o.batch, TraceRatio: 1,
			Desc: fmt.Sprintf("platformd as shipped, batch.size %d, traces on (sampler 1.0) to an in-process OTLP/HTTP receiver", o.batch)},
		{Name: otel10Contender, Kind: kindPlatformd, Batch: o.batch, TraceRatio: 0.1,
			Desc: fmt.Sprintf("platformd as shipped, batch.size %d, traces on (sampler 0.1) to an in-process OTLP/HTTP receiver", o.batch)},
	}
}

// startOTLP starts the receiver when a traced contender runs.
func (b *bench) startOTLP(ctx context.Context, selected []contender) error {
	if !slices.ContainsFunc(selected, func(c contender) bool { return c.TraceRatio > 0 }) {
		return nil
	}
	r, err := tracingtest.Start(ctx, tracingtest.Options{CountOnly: true})
	if err != nil {
		return err
	}
	b.otlp = r
	return nil
}

// otelEnv is env without any OTEL_ variable (no contender traces by
// accident), plus, for a traced contender, the receiver's endpoint and its
// sampler.
func (b *bench) otelEnv(c contender, env []string) []string {
	env = slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "OTEL_") })
	if c.TraceRatio <= 0 || b.otlp == nil {
		return env
	}
	return append(env, "OTEL_EXPORTER_OTLP_ENDPOINT="+b.otlp.HTTPEndpoint,
		"OTEL_TRACES_SAMPLER=parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG="+strconv.FormatFloat(c.TraceRatio, 'g', -1, 64))
}

// stopOTLP says what the receiver got (proof that the traced drains did
// export) and stops it.
func (b *bench) stopOTLP() {
	if b.otlp != nil {
		fmt.Printf("otlp receiver: %d spans in %d exports\n", b.otlp.Count(), b.otlp.Requests())
		b.otlp.Close()
	}
}

// tracingRatios adds the throughput cost of tracing: 1 - traced / platformd,
// on the medians and per paired round.
func (r *report) tracingRatios(pd *contenderReport) {
	for _, name := range []string{otelContender, otel10Contender} {
		c := r.find(name)
		if c == nil || len(c.Rounds) == 0 {
			continue
		}
		v := 1 - c.MsgsPerSec.Median/pd.MsgsPerSec.Median
		p := pairedRatio(c, pd)
		target := tracingOverheadTargets[name]
		r.Ratios = append(r.Ratios, ratio{Name: fmt.Sprintf("tracing overhead (1 - %s / platformd)", name), Value: v,
			Min: 1 - p.Max, Max: 1 - p.Min, Target: fmt.Sprintf("<= %.0f%%", 100*target), Met: v <= target})
		// Every contender is CPU-bound here: the work's CPU per drain
		// says the same as the throughput with far less of the machine's
		// noise (its median of paired rounds, not of medians).
		cpu := pairedCPU(c, pd)
		r.Ratios = append(r.Ratios, ratio{Name: fmt.Sprintf("tracing CPU overhead (%s / platformd CPU per drain - 1, paired)", name),
			Value: cpu.Median - 1, Min: cpu.Min - 1, Max: cpu.Max - 1, Target: fmt.Sprintf("<= %.0f%%", 100*target), Met: cpu.Median-1 <= target})
	}
}
