package config

import (
	"strings"
	"time"
)

// Console defaults and limits.
const (
	// ConsoleSessionTTLDefault is the default console.session_ttl.
	ConsoleSessionTTLDefault = 8 * time.Hour
	// ConsoleSampleEveryDefault is the default console.sample_every.
	ConsoleSampleEveryDefault = 5 * time.Second

	consoleSessionTTLMin  = time.Second
	consoleSessionTTLMax  = 30 * 24 * time.Hour
	consoleSampleEveryMin = 100 * time.Millisecond
	consoleSampleEveryMax = time.Minute
)

// ConsoleConfig configures the operators' web console. The console is off
// when the console block is absent; present, it needs listen. It serves
// with admin.tls's files when those are set, and signs operators in with
// admin.tokens.
type ConsoleConfig struct {
	// Listen is the console's address (e.g. 127.0.0.1:7071); required when
	// the block is present, distinct from admin.listen and metrics.listen.
	Listen string `yaml:"listen"`
	// SessionTTL is how long a sign-in lasts (default 8h, 1s to 720h).
	SessionTTL time.Duration `yaml:"session_ttl"`
	// SampleEvery is how often the console samples the pools' counters for
	// its processed/s charts (default 5s, 100ms to 1m).
	SampleEvery time.Duration `yaml:"sample_every"`
}

// Enabled reports whether the console is turned on.
func (c ConsoleConfig) Enabled() bool { return c.Listen != "" }

// console validates the console block and applies its defaults.
func (v *validator) console() {
	if !v.isSet("console") {
		return
	}
	c := &v.c.Console
	if !v.isSet("console.session_ttl") {
		c.SessionTTL = ConsoleSessionTTLDefault
	}
	if !v.isSet("console.sample_every") {
		c.SampleEvery = ConsoleSampleEveryDefault
	}
	switch {
	case c.Listen == "":
		v.ps.add("console.listen", "required (remove the console block to turn the console off)")
	case checkListen(c.Listen) != "":
		v.ps.add("console.listen", "%s", checkListen(c.Listen))
	case c.Listen == v.c.Admin.Listen && !strings.HasSuffix(c.Listen, ":0"):
		v.ps.add("console.listen", "same address as admin.listen")
	case c.Listen == v.c.Metrics.Listen && !strings.HasSuffix(c.Listen, ":0"):
		v.ps.add("console.listen", "same address as metrics.listen")
	}
	if c.SessionTTL < consoleSessionTTLMin || c.SessionTTL > consoleSessionTTLMax {
		v.ps.add("console.session_ttl", "%s out of range, want %s to %s",
			fmtDuration(c.SessionTTL), fmtDuration(consoleSessionTTLMin), fmtDuration(consoleSessionTTLMax))
	}
	if c.SampleEvery < consoleSampleEveryMin || c.SampleEvery > consoleSampleEveryMax {
		v.ps.add("console.sample_every", "%s out of range, want %s to %s",
			fmtDuration(c.SampleEvery), fmtDuration(consoleSampleEveryMin), fmtDuration(consoleSampleEveryMax))
	}
	if len(v.c.Admin.Tokens) == 0 {
		v.ps.add("console", "needs at least one admin.tokens entry to sign in with (the console has no anonymous access)")
	}
}
