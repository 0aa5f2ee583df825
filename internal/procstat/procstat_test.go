package procstat

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseProcStat(t *testing.T) {
	// comm with a space and a parenthesis; utime 150, stime 50, cutime 30,
	// cstime 20 ticks.
	line := "4242 (beam (x) smp) S 1 4242 4242 0 -1 4194560 100 0 0 0 150 50 30 20 20 0 30 0 12345 1000 100 18446744073709551615\n"
	pt, err := parseProcStat([]byte(line))
	require.NoError(t, err)
	require.Equal(t, "beam (x) smp", pt.comm)
	require.Equal(t, 1, pt.ppid)
	require.InDelta(t, 2.0, pt.self, 1e-9)
	require.InDelta(t, 0.5, pt.children, 1e-9)
}

func TestGroupCPUCountsReapedChildrenOnceAtTheRoot(t *testing.T) {
	procs := map[int]procTimes{
		1:  {comm: "init", self: 100, children: 1000},
		10: {comm: "postgres", ppid: 1, self: 1, children: 5},  // postmaster: 5s of reaped backends
		11: {comm: "postgres", ppid: 10, self: 2, children: 7}, // a backend's own children are not the group's
		12: {comm: "postgres", ppid: 10, self: 3},
		20: {comm: "beam.smp", ppid: 1, self: 4, children: 1},
	}
	require.InDelta(t, 1+5+2+3, groupCPU(procs, "postgres"), 1e-9)
	require.InDelta(t, 5, groupCPU(procs, "beam.smp"), 1e-9)
}

func TestParseVmHWM(t *testing.T) {
	n, err := parseVmHWM(strings.NewReader("Name:\tx\nVmPeak:\t  100 kB\nVmHWM:\t   2048 kB\nVmRSS:\t 1000 kB\n"))
	require.NoError(t, err)
	require.Equal(t, int64(2048*1024), n)
	_, err = parseVmHWM(strings.NewReader("Name:\tx\n"))
	require.Error(t, err)
}

func TestParseMachineCPU(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	v, err := parseMachineCPU([]byte("cpu  100 10 50 9999 99 5 5 30 40 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"))
	require.NoError(t, err)
	require.InDelta(t, 2.0, v, 1e-9) // 100+10+50+5+5+30 ticks
}

func TestReadCountsThisProcess(t *testing.T) {
	s0 := Read(os.Getpid())
	for i := 0; Read(os.Getpid()).Consumer-s0.Consumer < 0.02; i++ { // burn 20ms of CPU, observably
		_ = strings.Repeat("x", i%1000)
	}
	d := Read(os.Getpid()).Sub(s0)
	require.GreaterOrEqual(t, d.Consumer, 0.02)
	require.GreaterOrEqual(t, d.Machine, d.Consumer*0.5, "the machine's busy time includes this process's")
}

func TestProcessAndSelfCountThisProcess(t *testing.T) {
	// Spin until getrusage counts 100 ms of CPU (wall time says nothing on
	// a loaded machine), then /proc must have counted most of it too.
	self0, proc0 := Self(), Process(os.Getpid())
	deadline := time.Now().Add(20 * time.Second)
	for Self()-self0 < 100*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("Self grew by %s in 20 s of spinning", Self()-self0)
		}
	}
	if grew := Process(os.Getpid()) - proc0; grew < 50*time.Millisecond {
		t.Errorf("Process grew by %s while Self grew by 100 ms", grew)
	}
}
