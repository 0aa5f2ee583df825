//go:build unix

package procstat

import (
	"syscall"
	"time"
)

// Self returns the CPU time, user and system, this process has used so
// far (getrusage: microseconds, finer than /proc's 10 ms ticks), or 0 when
// it cannot be read. A cost benchmark's CPU per operation counts the work
// of every goroutine, background exporters included.
func Self() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
