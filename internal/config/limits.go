package config

import "math"

// PoolLimitsConfig is a pool's `limits` (docs/operations.md, "Limits"): its default
// live limits, which the admin API's SetPoolLimits overrides at runtime.
type PoolLimitsConfig struct {
	// Rate is in events per second for the pool as a whole, across every
	// daemon running it; absent or 0: no limit.
	Rate float64 `yaml:"rate"`
	// Burst is how many events may go at once above the rate (the token
	// bucket's size); absent or 0: the rate (at least 1).
	Burst int `yaml:"burst"`
	// Concurrency, when set, is the pool's number of workers, in place of
	// the pool's own `concurrency` key.
	Concurrency int `yaml:"concurrency"`
}

// Bounds of a pool's limits.
const (
	// PoolRateMax is the largest limits.rate, in events per second.
	PoolRateMax = 1e9
	// PoolBurstMax is the largest limits.burst.
	PoolBurstMax = 1 << 30
)

// poolLimits checks pp.limits (applyDefaults already let
// limits.concurrency stand for the pool's concurrency).
func (v *validator) poolLimits(pp string, p *PoolConfig) {
	l := p.Limits
	switch {
	case math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0):
		v.ps.add(pp+".limits.rate", "must be a finite number of events per second (got %v)", l.Rate)
	case l.Rate < 0 || l.Rate > PoolRateMax:
		v.ps.add(pp+".limits.rate", "must be between 0 (no limit) and %g events per second (got %g)", float64(PoolRateMax), l.Rate)
	}
	if l.Burst < 0 || l.Burst > PoolBurstMax {
		v.ps.add(pp+".limits.burst", "must be between 0 (the rate) and %d (got %d)", PoolBurstMax, l.Burst)
	}
	if l.Burst > 0 && l.Rate == 0 {
		v.ps.add(pp+".limits.burst", "needs limits.rate")
	}
	if l.Concurrency < 0 || l.Concurrency > concurrencyMax {
		v.ps.add(pp+".limits.concurrency", "must be between 1 and %d (got %d)", concurrencyMax, l.Concurrency)
	}
}

// RemoteConcurrencyAdaptive is a remote handler's `concurrency: adaptive`.
const RemoteConcurrencyAdaptive = "adaptive"

// remoteLimits checks a remote handler's max_in_flight and concurrency at
// path.
func (v *validator) remoteLimits(path string, h *RemoteHandlerConfig) {
	if h.MaxInFlight < 0 || h.MaxInFlight > concurrencyMax*4 {
		v.ps.add(path+".max_in_flight", "must be between 0 (no limit) and %d (got %d)", concurrencyMax*4, h.MaxInFlight)
	}
	if h.Concurrency != "" && h.Concurrency != RemoteConcurrencyAdaptive {
		v.ps.add(path+".concurrency", "must be %q or absent (got %q)", RemoteConcurrencyAdaptive, h.Concurrency)
	}
}
