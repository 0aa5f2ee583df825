package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/procstat"
)

// errExactlyOnce marks a failed exactly-once check: the bench stops at
// once, whatever the retry policy for other errors.
var errExactlyOnce = errors.New("EXACTLY-ONCE CHECK FAILED")

// drainResult is one contender draining the pre-loaded queue once.
type drainResult struct {
	Round   int     `json:"round"`
	Seconds float64 `json:"seconds"`
	// MsgsPerSec counts every delivery, duplicates included.
	MsgsPerSec float64 `json:"msgs_per_sec"`
	// CPU seconds over the drain window.
	CPUBroker   float64 `json:"cpu_broker_s"`
	CPUDB       float64 `json:"cpu_db_s"`
	CPUConsumer float64 `json:"cpu_consumer_s"`
	// CPUOther is the rest of the machine's busy time: the bench itself,
	// the kernel, and whatever else runs.
	CPUOther    float64 `json:"cpu_other_s"`
	PeakRSS     int64   `json:"peak_rss_bytes"`
	Effects     effects `json:"effects"`
	Acked       int     `json:"acked,omitempty"`
	DupsApplied int     `json:"duplicates_applied"`
	// Outcomes is platformd's platformd_messages_total at the end.
	Outcomes outcomes `json:"outcomes,omitempty"`
	// Batches is platformd's platformd_batch_size_count at the end: the
	// mean batch is the deliveries over it.
	Batches    float64 `json:"batches,omitempty"`
	LoadPerSec float64 `json:"load_msgs_per_sec"`
	LoadAvg    float64 `json:"loadavg_1m"`
}

// drain loads the workload into the contender's queue, starts it, and
// measures from the moment it starts consuming (its consumers appear on the
// queue, or the queue shrinks) until the queue has no ready message and the
// effects are all committed (raw: until it acked every message), then
// checks that every effect happened exactly once.
func (b *bench) drain(ctx context.Context, c contender, round int) (drainResult, error) {
	res := drainResult{Round: round}
	queue := b.queueOf(c)
	if err := b.brk.declare(queue); err != nil {
		return res, err
	}
	if err := b.dbFor(c).reset(ctx, b.o.checkpoint); err != nil {
		return res, err
	}
	// The failure store is not emptied between drains: check compares
	// with what it held before this one.
	failedBefore, err := failureRows(ctx, b.dbFor(c))
	if err != nil {
		return res, err
	}
	total := b.wl.total()
	lstart := time.Now()
	conn, err := b.brk.connection()
	if err != nil {
		return res, err
	}
	if err := load(ctx, conn, queue, b.wl.bodies, b.o.loadChannels); err != nil {
		return res, fmt.Errorf("load %s: %w", queue, err)
	}
	res.LoadPerSec = float64(total) / time.Since(lstart).Seconds()
	if err := b.brk.waitDepth(ctx, queue, total); err != nil {
		return res, err
	}
	if b.o.checkpoint {
		syscall.Sync() // the queue just written: its writeback is nobody's drain
	}
	sleepCtx(ctx, b.o.settle)
	res.LoadAvg = procstat.LoadAvg()

	var want int // reservations at the end
	if c.dedup() {
		want = b.wl.distinct * b.wl.lines
	}
	profile := ""
	if b.o.pprofDir != "" && c.Kind == kindPlatformd && !c.Alt {
		profile = fmt.Sprintf("%s/%s-r%d", b.o.pprofDir, c.Name, round)
	}
	p, err := b.start(c, queue, fmt.Sprintf("r%d", round), total, "", profile)
	if err != nil {
		return res, err
	}
	defer func() { _ = p.stop(30 * time.Second) }()

	var t0, t1 time.Time
	var s0, s1 procstat.Sample
	var tail tailPacer
	started := time.Now()
	tick := time.NewTicker(b.o.poll)
	defer tick.Stop()
	deadline := time.Now().Add(b.o.drainTimeout)
poll:
	for {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-tick.C:
		}
		if err := p.running(); err != nil {
			return res, err
		}
		if time.Now().After(deadline) {
			n, _ := b.dbFor(c).reservations(ctx)
			return res, fmt.Errorf("%s: not drained after %s (reservations %d of %d); see %s", c.Name, b.o.drainTimeout, n, want, p.logPath)
		}
		ready, consumers, err := b.brk.depth(queue)
		if err != nil {
			return res, err
		}
		if b.o.trace {
			fmt.Fprintf(os.Stderr, "trace %s %s ready=%d consumers=%d\n", c.Name, time.Since(started).Round(time.Millisecond), ready, consumers)
		}
		if t0.IsZero() {
			if consumers == 0 && ready == total {
				continue
			}
			t0, s0 = time.Now(), procstat.Read(p.pid())
		}
		if ready > 0 {
			continue
		}
		if c.reportsDone() {
			select {
			case ns := <-p.doneAt:
				t1 = time.Unix(0, ns)
				s1 = procstat.Read(p.pid())
				break poll
			default:
				continue
			}
		}
		// The tail: no message left to deliver, some not yet committed.
		// Counting is a scan of the table, so count at a pace set by the
		// progress: often near the end only.
		if time.Now().Before(tail.next) {
			continue
		}
		done, progress, goal, err := b.finished(ctx, c, p, want)
		if err != nil {
			return res, err
		}
		if done {
			t1, s1 = time.Now(), procstat.Read(p.pid())
			break poll
		}
		tail.schedule(progress, goal, b.o.poll)
	}
	res.PeakRSS, _ = procstat.PeakRSS(p.pid())
	d := s1.Sub(s0)
	res.Seconds = t1.Sub(t0).Seconds()
	res.MsgsPerSec = float64(total) / res.Seconds
	// A process of a group that exits unreaped by the group (a postmaster
	// restarted by someone else) makes a delta slightly negative: floor
	// at zero.
	res.CPUBroker, res.CPUDB, res.CPUConsumer = max(d.Broker, 0), max(d.DB, 0), max(d.Consumer, 0)
	res.CPUOther = max(d.Machine-d.Broker-d.DB-d.Consumer, 0)

	if c.Kind == kindRaw {
		res.Acked = total
	}
	if p.metricsURL != "" {
		// Every delivery settled: processed + duplicate must reach the
		// total (the last duplicates may be acked just after the last
		// effect committed).
		wantProcessed := float64(b.wl.distinct)
		until := time.Now().Add(30 * time.Second)
		for {
			dm, err := scrapeMessages(ctx, p.metricsURL)
			m := dm.outcomes
			if err == nil && m.settled() >= float64(total) {
				res.Outcomes, res.Batches = m, dm.batches
				if c.SkipDedup {
					wantProcessed = m[metrics.OutcomeProcessed] // checked against the table below
				}
				if m[metrics.OutcomeProcessed] != wantProcessed || m.settled() != float64(total) ||
					m[metrics.OutcomeFailed]+m[metrics.OutcomeRejected]+m[metrics.OutcomeRetried] != 0 {
					return res, fmt.Errorf("%s: %w: platformd_messages_total %v, want processed %v and %v in all", c.Name, errExactlyOnce, m, wantProcessed, total)
				}
				break
			}
			if time.Now().After(until) {
				return res, fmt.Errorf("%s: platformd_messages_total did not reach %d within 30s (last %v, err %w)", c.Name, total, m, err)
			}
			sleepCtx(ctx, 50*time.Millisecond)
		}
	}
	// Quorum queues apply settlements asynchronously: a channel closed
	// right after its last ack can have those deliveries returned to the
	// queue (seen here with 3.10). Let the acks land before stopping, so
	// that what the check below finds back in the queue was really not
	// acked.
	sleepCtx(ctx, time.Second)
	if err := p.stop(30 * time.Second); err != nil {
		return res, err
	}
	return res, b.check(ctx, c, queue, failedBefore, &res)
}

// finished reports whether c has committed everything: the expected
// reservations, or, for platformd without the dedup insert (which still
// skips a copy that shares a batch with its original, so that the count of
// effects is not known in advance), every delivery settled as processed or
// duplicate in its metrics.
func (b *bench) finished(ctx context.Context, c contender, p *proc, want int) (done bool, progress, goal int, err error) {
	if c.Kind == kindPlatformd && c.SkipDedup {
		dm, err := scrapeMessages(ctx, p.metricsURL)
		if err != nil {
			return false, 0, 0, err
		}
		n := int(dm.outcomes.settled())
		return n >= b.wl.total(), n, b.wl.total(), nil
	}
	n, err := b.dbFor(c).reservations(ctx)
	if err != nil {
		return false, 0, 0, err
	}
	if n > want {
		return false, 0, 0, fmt.Errorf("%s: %w: %d reservations, more than the %d expected", c.Name, errExactlyOnce, n, want)
	}
	return n == want, n, want, nil
}

// tailPacer spaces the completion checks of a drain's tail: half the
// estimated time left, between the poll period and 200 ms.
type tailPacer struct {
	next      time.Time
	lastN     int
	lastT     time.Time
	hasSample bool
}

func (t *tailPacer) schedule(progress, goal int, poll time.Duration) {
	now := time.Now()
	wait := poll
	if t.hasSample && progress > t.lastN {
		rate := float64(progress-t.lastN) / now.Sub(t.lastT).Seconds()
		eta := time.Duration(float64(goal-progress) / rate * float64(time.Second))
		wait = min(max(eta/2, poll), 200*time.Millisecond)
	}
	t.lastN, t.lastT, t.hasSample = progress, now, true
	t.next = now.Add(wait)
}

// check verifies, once the contender has stopped (so that anything it had
// not acked is back in the queue), that the queue is empty, that platformd
// stored no failure (failedBefore: the rows of the failure store before
// the drain), and that each event had its effect exactly once (no-dedup:
// that every delivery had it, and counts the duplicates it applied).
func (b *bench) check(ctx context.Context, c contender, queue string, failedBefore int, res *drainResult) error {
	// Unacked deliveries return to the queue when the channel closes:
	// give the broker a moment.
	var ready int
	for range 10 {
		var err error
		if ready, _, err = b.brk.depth(queue); err != nil {
			return err
		}
		if ready > 0 {
			break
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	if ready != 0 {
		return fmt.Errorf("%s: %w: %d messages back in %s after the contender stopped (not acked)", c.Name, errExactlyOnce, ready, queue)
	}
	if c.Kind == kindPlatformd {
		failed, err := failureRows(ctx, b.dbFor(c))
		if err != nil {
			return err
		}
		if d := failed - failedBefore; d != 0 {
			return fmt.Errorf("%s: %d failures stored in platform.failed_event of pool %s (see: platformctl failures list --pool %s)",
				c.Name, d, benchPool, benchPool)
		}
	}
	if c.Kind == kindRaw {
		return nil
	}
	e, err := b.dbFor(c).effects(ctx)
	if err != nil {
		return err
	}
	res.Effects = e
	lines, distinct, total := b.wl.lines, b.wl.distinct, b.wl.total()
	if c.dedup() {
		if e.Reservations != distinct*lines || e.DistinctOrders != distinct || e.ProcessedRows != distinct {
			return fmt.Errorf("%s: %w: reservations %d (want %d), distinct orders %d (want %d), processed_event rows %d (want %d)",
				c.Name, errExactlyOnce, e.Reservations, distinct*lines, e.DistinctOrders, distinct, e.ProcessedRows, distinct)
		}
		return nil
	}
	// No dedup: every delivery processed applied its effect (platformd
	// still skips a copy in the same batch as its original); report the
	// duplicates applied.
	applied := total
	if res.Outcomes != nil {
		applied = int(res.Outcomes[metrics.OutcomeProcessed])
	}
	if e.Reservations != applied*lines || e.DistinctOrders != distinct || e.ProcessedRows != 0 {
		return fmt.Errorf("%s: %w: reservations %d (want one per processed delivery: %d), distinct orders %d (want %d), processed_event rows %d (want 0)",
			c.Name, errExactlyOnce, e.Reservations, applied*lines, e.DistinctOrders, distinct, e.ProcessedRows)
	}
	res.DupsApplied = e.Reservations/lines - distinct
	return nil
}

// benchPool is the pool of the generated config (one per contender's
// daemon, all on the same name).
const benchPool = "bench-stock"

// failureRows counts the bench pool's rows of the failure store
// (platform.failed_event, every state), 0 before platformd created it.
func failureRows(ctx context.Context, d *benchDB) (int, error) {
	var exists bool
	if err := d.pool.QueryRow(ctx, `SELECT to_regclass('platform.failed_event') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, fmt.Errorf("database: find the failure store: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var n int
	if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM platform.failed_event WHERE pool = $1`, benchPool).Scan(&n); err != nil {
		return 0, fmt.Errorf("database: count failures: %w", err)
	}
	return n, nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
