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
	// The same two with the -alt-bin binary: A/B of a change to tracing.
	altOtelContender   = "platformd-alt-otel"
	altOtel10Contender = "platformd-alt-otel10"
)

// tracingOverheadTargets are the ceilings on the throughput cost of
// tracing, by contender.
var tracingOverheadTargets = map[string]float64{otelContender: 0.10, otel10Contender: 0.03}

// tracedPairs are the traced contenders and the untraced one their cost is
// measured against.
var tracedPairs = []struct{ traced, base string }{
	{otelContender, "platformd"}, {otel10Contender, "platformd"},
	{altOtelContender, "platformd-alt"}, {altOtel10Contender, "platformd-alt"},
}

func tracedContenders(o *options) []contender {
	return []contender{
		{Name: otelContender, Kind: kindPlatformd, Batch: o.batch, TraceRatio: 1,
			Desc: fmt.Sprintf("platformd as shipped, %s, traces on (sampler 1.0) to an in-process OTLP/HTTP receiver", batchDesc(o.batch))},
		{Name: otel10Contender, Kind: kindPlatformd, Batch: o.batch, TraceRatio: 0.1,
			Desc: fmt.Sprintf("platformd as shipped, %s, traces on (sampler 0.1) to an in-process OTLP/HTTP receiver", batchDesc(o.batch))},
		{Name: altOtelContender, Kind: kindPlatformd, Batch: o.batch, TraceRatio: 1, Alt: true,
			Desc: fmt.Sprintf("the -alt-bin binary as %s (A/B of a change to tracing)", otelContender)},
		{Name: altOtel10Contender, Kind: kindPlatformd, Batch: o.batch, TraceRatio: 0.1, Alt: true,
			Desc: fmt.Sprintf("the -alt-bin binary as %s (A/B of a change to tracing)", otel10Contender)},
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

// tracingRatios adds the throughput cost of tracing: 1 - traced / untraced
// (platformd, or platformd-alt for the alt binary's), on the medians and
// per paired round.
func (r *report) tracingRatios() {
	for _, p := range tracedPairs {
		c, base := r.find(p.traced), r.find(p.base)
		if !ran(c) || !ran(base) {
			continue
		}
		target, judged := tracingOverheadTargets[p.traced]
		ok := unjudged
		if judged {
			ok = atMost(target)
		}
		r.overhead(c, base, fmt.Sprintf("tracing overhead (1 - %s / %s)", p.traced, p.base), targetText(judged, target), ok)
		// Every contender is CPU-bound here: the work's CPU per drain
		// says the same as the throughput with far less of the machine's
		// noise (its median of paired rounds, not of medians).
		cpu := pairedCPU(c, base)
		r.Ratios = append(r.Ratios, verdict(ratio{Name: fmt.Sprintf("tracing CPU overhead (%s / %s CPU per drain - 1, paired)", p.traced, p.base),
			Value: cpu.Median - 1, Min: cpu.Min - 1, Max: cpu.Max - 1, Target: targetText(judged, target)}, ok))
	}
}

// targetText is a judged ratio's target; the alt binary's are reference
// figures (no target).
func targetText(judged bool, target float64) string {
	if !judged {
		return ""
	}
	return fmt.Sprintf("<= %.0f%%", 100*target)
}
