package soak

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// series are the sampled curves, in the order of the picture's panels;
// each has the growth over the last two thirds of the run that makes it
// a leak: the larger of a share of its median and an absolute floor.
var series = []struct {
	name, unit, panel string
	rel, floor        float64
}{
	{"rss_a", "MiB", "daemon RSS", 0.2, 24},
	{"rss_b", "MiB", "daemon RSS", 0.2, 24},
	{"goroutines_a", "", "daemon goroutines", 0.2, 40},
	{"goroutines_b", "", "daemon goroutines", 0.2, 40},
	{"fds_a", "", "daemon open fds", 0.2, 20},
	{"fds_b", "", "daemon open fds", 0.2, 20},
	{"db_conns", "", "database connections", 0.25, 8},
	{"broker_conns", "", "broker connections and channels", 0.25, 5},
	{"broker_channels", "", "broker connections and channels", 0.25, 15},
	{"broker_mem", "MiB", "broker memory (largest node, as its VM counts it)", 0.25, 64},
	{"pg_mem", "MiB", "PostgreSQL memory (private)", 0.25, 64},
}

// sample is one reading of every series (NaN: not readable then).
type sample struct {
	at time.Time
	v  map[string]float64
}

type sampler struct {
	w    *world
	a, b *daemon

	mu      sync.Mutex
	samples []sample
}

func (s *sampler) run(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		s.take(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *sampler) take(ctx context.Context) {
	v := map[string]float64{}
	for _, d := range []*daemon{s.a, s.b} {
		pid := d.pid()
		v["rss_"+d.name], v["fds_"+d.name], v["goroutines_"+d.name] = math.NaN(), math.NaN(), math.NaN()
		if pid == 0 {
			continue
		}
		if kb, err := statusKB(pid, "VmRSS"); err == nil {
			v["rss_"+d.name] = kb / 1024
		}
		if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
			v["fds_"+d.name] = float64(len(ents))
		}
		if r, err := d.scrape(ctx); err == nil {
			v["goroutines_"+d.name] = r.goroutines
		}
	}
	v["db_conns"] = math.NaN()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if n, err := s.w.pgExec(cctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'platformd%'`); err == nil {
		v["db_conns"] = float64(n)
	}
	cancel()
	// The broker's memory as each node's VM counts it (erlang:memory),
	// the largest node's: an Erlang VM's resident size is a high-water
	// mark its allocators keep, and a node restarted by a fault starts
	// low and climbs back, which a sum over the nodes would show as
	// growth.
	v["broker_conns"], v["broker_channels"], v["broker_mem"] = math.NaN(), math.NaN(), math.NaN()
	if out, err := s.w.ctl(ctx, "-q", "eval", `io:format("~p ~p ~p~n", [length(rabbit_networking:connections()), length(rabbit_channel:list()), `+
		`lists:max([0 | [M || N <- rabbit_nodes:all_running(), M <- [rpc:call(N, erlang, memory, [total], 5000)], is_integer(M)]])]).`); err == nil {
		f := strings.Fields(out)
		if len(f) >= 3 {
			c, err1 := strconv.Atoi(f[0])
			ch, err2 := strconv.Atoi(f[1])
			m, err3 := strconv.ParseFloat(f[2], 64)
			if err1 == nil && err2 == nil {
				v["broker_conns"], v["broker_channels"] = float64(c), float64(ch)
			}
			if err3 == nil && m > 0 {
				v["broker_mem"] = m / (1 << 20)
			}
		}
	}
	v["pg_mem"] = sumAnon(s.w.pgPIDs())
	s.mu.Lock()
	s.samples = append(s.samples, sample{at: time.Now(), v: v})
	s.mu.Unlock()
}

func (s *sampler) snapshot() []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sample(nil), s.samples...)
}

// statusKB reads a "Key: N kB" line of /proc/<pid>/status.
func statusKB(pid int, key string) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key+":"); ok {
			fs := strings.Fields(rest)
			if len(fs) > 0 {
				return strconv.ParseFloat(fs[0], 64)
			}
		}
	}
	return 0, fmt.Errorf("%s not in /proc/%d/status", key, pid)
}

// sumAnon is the private (anonymous) resident memory of pids, in MiB: a
// server's shared buffers, which RSS counts as they are touched, would
// look like growth.
func sumAnon(pids []int) float64 {
	if len(pids) == 0 {
		return math.NaN()
	}
	sum := 0.0
	for _, pid := range pids {
		if kb, err := statusKB(pid, "RssAnon"); err == nil {
			sum += kb
		}
	}
	return sum / 1024
}

// pgPIDs are the private server's postmaster and its children.
func (w *world) pgPIDs() []int {
	b, err := os.ReadFile(filepath.Join(w.pgData, "postmaster.pid"))
	if err != nil {
		return nil
	}
	master, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if err != nil {
		return nil
	}
	out := []int{master}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(st)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(master) {
			out = append(out, pid)
		}
	}
	return out
}

// verdict is one series' judgement over the last two thirds of the run.
type verdict struct {
	name, unit               string
	slopePerMin, growth, tol float64
	median                   float64
	step                     float64 // last third's median less the middle third's
	points                   int
	growing                  bool
}

// judge fits a least-squares line to each series over the last two
// thirds of the samples. A curve grows when that line climbs more than
// its tolerance over the window and its level rose too: the median of
// the last third above the middle third's by half the tolerance. The
// slope alone is fooled by a restart's recovery (a daemon or a node a
// fault restarted climbs back to where it was); the step alone by noise.
func judge(samples []sample) []verdict {
	var out []verdict
	if len(samples) < 3 {
		return out
	}
	t0, t1 := samples[0].at, samples[len(samples)-1].at
	from := t0.Add(t1.Sub(t0) / 3)
	for _, s := range series {
		var xs, ys []float64
		for _, sm := range samples {
			y := sm.v[s.name]
			if sm.at.Before(from) || math.IsNaN(y) {
				continue
			}
			xs = append(xs, sm.at.Sub(t0).Minutes())
			ys = append(ys, y)
		}
		v := verdict{name: s.name, unit: s.unit, points: len(xs)}
		if len(xs) >= 3 {
			v.slopePerMin = slope(xs, ys)
			v.growth = v.slopePerMin * (xs[len(xs)-1] - xs[0])
			v.median = median(ys)
			v.tol = math.Max(s.rel*v.median, s.floor)
			var mid, last []float64
			cut := xs[0] + (xs[len(xs)-1]-xs[0])/2
			for i, x := range xs {
				if x < cut {
					mid = append(mid, ys[i])
				} else {
					last = append(last, ys[i])
				}
			}
			if len(mid) > 0 && len(last) > 0 {
				v.step = median(last) - median(mid)
			}
			v.growing = v.growth > v.tol && v.step > v.tol/2
		}
		out = append(out, v)
	}
	return out
}

func slope(xs, ys []float64) float64 {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / den
}

func median(ys []float64) float64 {
	c := append([]float64(nil), ys...)
	sort.Float64s(c)
	return c[len(c)/2]
}

// writeCSV writes the samples, one row each, for other tools.
func writeCSV(path string, samples []sample) error {
	var b strings.Builder
	b.WriteString("seconds")
	for _, s := range series {
		b.WriteString("," + s.name)
	}
	b.WriteString("\n")
	for _, sm := range samples {
		fmt.Fprintf(&b, "%.0f", sm.at.Sub(samples[0].at).Seconds())
		for _, s := range series {
			fmt.Fprintf(&b, ",%.1f", sm.v[s.name])
		}
		b.WriteString("\n")
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
