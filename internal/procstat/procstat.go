// Package procstat reads the CPU time of processes and of the machine from
// /proc (Linux only): the bench program's and the benchmarks' way to judge
// speed by CPU per message of each party (consumer, broker, database),
// which a shared machine's load changes far less than it changes msgs/s.
// Every function reads /proc afresh; all are safe for concurrent use.
package procstat

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of the times in /proc/<pid>/stat. It is
// 100 on every Linux architecture Go supports (the kernel's ABI constant,
// independent of CONFIG_HZ).
const clockTicks = 100

// procTimes are the CPU times of one process from /proc/<pid>/stat, in
// seconds: its own (utime+stime) and its reaped children's
// (cutime+cstime).
type procTimes struct {
	self, children float64
	ppid           int
	comm           string
}

// readProcStat parses /proc/<pid>/stat. The comm field is in parentheses
// and may itself hold spaces or parentheses, so fields are counted from the
// last ')'.
func readProcStat(pid int) (procTimes, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procTimes{}, err
	}
	return parseProcStat(b)
}

func parseProcStat(b []byte) (procTimes, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return procTimes{}, errors.New("procstat: malformed stat line")
	}
	comm := string(b[open+1 : end])
	// After ") ": field 3 (state) is f[0]; ppid (4) is f[1]; utime (14)
	// is f[11], stime f[12], cutime f[13], cstime f[14].
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 15 {
		return procTimes{}, errors.New("procstat: short stat line")
	}
	var v [4]float64
	for i := range v {
		n, err := strconv.ParseInt(f[11+i], 10, 64)
		if err != nil {
			return procTimes{}, fmt.Errorf("procstat: field %d: %w", 14+i, err)
		}
		v[i] = float64(n) / clockTicks
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return procTimes{}, fmt.Errorf("procstat: ppid: %w", err)
	}
	return procTimes{self: v[0] + v[1], children: v[2] + v[3], ppid: ppid, comm: comm}, nil
}

// Process returns the CPU time, user and system, that process pid has used
// so far, its reaped children's aside (10 ms ticks of /proc/<pid>/stat),
// or 0 when it cannot be read (no such process, no /proc).
func Process(pid int) time.Duration {
	t, err := readProcStat(pid)
	if err != nil {
		return 0
	}
	return time.Duration(t.self * float64(time.Second))
}

// PeakRSS returns VmHWM of pid in bytes.
func PeakRSS(pid int) (int64, error) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return parseVmHWM(f)
}

func parseVmHWM(f interface{ Read([]byte) (int, error) }) (int64, error) {
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			fields := strings.Fields(rest)
			if len(fields) != 2 || fields[1] != "kB" {
				return 0, fmt.Errorf("procstat: unexpected VmHWM line %q", line)
			}
			kb, err := strconv.ParseInt(fields[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("procstat: VmHWM: %w", err)
			}
			return kb * 1024, nil
		}
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("procstat: no VmHWM line")
}

// allProcs returns the stat of every process readable now, by pid.
// Processes that exit while the directory is read are skipped.
func allProcs() map[int]procTimes {
	out := map[int]procTimes{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if t, err := readProcStat(pid); err == nil {
			out[pid] = t
		}
	}
	return out
}

// groupCPU is the CPU, in seconds, consumed so far by every process whose
// comm is name, counting the ones already gone: a live process counts its
// own times, and a root of the group (a process whose parent is not in the
// group: the postmaster) also counts its reaped children's. A backend that
// exits is reaped by the postmaster, so its times move from the first sum
// to the second and the total stays monotonic. Deltas of groupCPU between
// two instants are exact whatever processes came and went in between.
func groupCPU(procs map[int]procTimes, name string) float64 {
	var total float64
	for _, t := range procs {
		if t.comm != name {
			continue
		}
		total += t.self
		if p, ok := procs[t.ppid]; !ok || p.comm != name {
			total += t.children
		}
	}
	return total
}

// brokerCPU is groupCPU of the RabbitMQ server's beam.smp: rabbitmqctl
// and the other CLI tools run in a beam.smp of their own, which comes and
// goes (other users' tests call them) and must not count.
func brokerCPU(procs map[int]procTimes) float64 {
	servers := map[int]procTimes{}
	for pid, t := range procs {
		if t.comm != "beam.smp" {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte("rabbit\x00boot")) {
			servers[pid] = t
		}
	}
	if len(servers) == 0 {
		return groupCPU(procs, "beam.smp")
	}
	return groupCPU(servers, "beam.smp")
}

// machineCPU returns the busy CPU seconds of the whole machine since boot
// (all of /proc/stat's "cpu" line but idle and iowait).
func machineCPU() (float64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseMachineCPU(b)
}

func parseMachineCPU(b []byte) (float64, error) {
	line, _, _ := bytes.Cut(b, []byte{'\n'})
	f := strings.Fields(string(line))
	if len(f) < 8 || f[0] != "cpu" {
		return 0, errors.New("procstat: malformed /proc/stat")
	}
	var busy int64
	for i, s := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		if i >= 8 { // guest and guest_nice are already in user and nice
			break
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("procstat: /proc/stat: %w", err)
		}
		busy += n
	}
	return float64(busy) / clockTicks, nil
}

// LoadAvg returns the 1-minute load average, or -1 when it can't be read.
func LoadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// Sample is a snapshot of the CPU, in seconds, consumed so far by each
// party: Consumer is one process (and its reaped children), Broker the
// RabbitMQ server, DB every postgres process of the machine, Machine the
// whole machine's busy time. Only differences of two samples mean anything.
type Sample struct {
	Consumer, Broker, DB, Machine float64
}

// Read samples the CPU of the consumer process pid (os.Getpid() for a
// benchmark running the daemon in-process), the broker and the database.
func Read(pid int) Sample {
	procs := allProcs()
	var s Sample
	if t, ok := procs[pid]; ok {
		s.Consumer = t.self + t.children
	}
	s.Broker = brokerCPU(procs)
	s.DB = groupCPU(procs, "postgres")
	s.Machine, _ = machineCPU()
	return s
}

// Sub returns s - o, the CPU consumed between two samples.
func (s Sample) Sub(o Sample) Sample {
	return Sample{Consumer: s.Consumer - o.Consumer, Broker: s.Broker - o.Broker, DB: s.DB - o.DB, Machine: s.Machine - o.Machine}
}
