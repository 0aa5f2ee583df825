package daemon

import (
	"runtime/debug"
	"testing"
)

// Without GOGC in the environment the daemon collects at GCPercentDefault;
// with one, the runtime's reading of it stands.
func TestTuneGC(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	if _, set := tuneGC(func(k string) string {
		if k == "GOGC" {
			return "150"
		}
		return ""
	}); set {
		t.Fatal("tuneGC overrode GOGC from the environment")
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GC percent %d after tuneGC with GOGC set, want 100 untouched", got)
	}

	gc, set := tuneGC(func(string) string { return "" })
	if !set || gc != GCPercentDefault {
		t.Fatalf("tuneGC() = %d, %v; want %d, true", gc, set, GCPercentDefault)
	}
	if got := debug.SetGCPercent(100); got != GCPercentDefault {
		t.Fatalf("GC percent %d, want %d", got, GCPercentDefault)
	}
}
