package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
)

// latencyResult is publish-to-commit latency at a fixed publish rate.
type latencyResult struct {
	// Measure is publish-to-commit (the commit's NOTIFY reaching a
	// listener) or, for raw, publish-to-ack.
	Measure  string  `json:"measure"`
	Rate     float64 `json:"rate_msgs_per_sec"`
	Samples  int     `json:"samples"`
	P50ms    float64 `json:"p50_ms"`
	P90ms    float64 `json:"p90_ms"`
	P99ms    float64 `json:"p99_ms"`
	P999ms   float64 `json:"p999_ms"`
	MaxMs    float64 `json:"max_ms"`
	Duration string  `json:"duration"`
}

// expectedConsumers is how many consumers c registers on its queue.
func (b *bench) expectedConsumers(c contender) int {
	if c.Kind == kindRaw {
		return b.o.rawConsumers
	}
	return b.o.workers
}

// latency publishes at a fixed rate into c's empty queue while c runs, and
// measures each event from its publish (occurred_at is set to that instant)
// to the commit of its reservation. The commit instant is observed through
// a trigger on reservation that NOTIFYs the order id: PostgreSQL delivers a
// notification only after the sending transaction has committed, so its
// arrival at the bench's LISTEN session is when the effect became durable
// and visible to others (an upper bound on the commit time by the
// notification's delivery, well under a millisecond on the loopback).
// Events published during the warm-up are not counted.
func (b *bench) latency(ctx context.Context, c contender) (latencyResult, error) {
	res := latencyResult{Measure: "publish-to-commit (" + b.o.probe + " probe)", Duration: b.o.latencyDuration.String()}
	if c.Kind == kindRaw {
		res.Measure = "publish-to-ack"
	}
	queue := b.queueOf(c)
	if err := b.brk.declare(queue); err != nil {
		return res, err
	}
	if err := b.dbFor(c).reset(ctx, b.o.checkpoint); err != nil {
		return res, err
	}

	var mu sync.Mutex
	committed := map[uuid.UUID]time.Time{}
	record := func(id uuid.UUID, at time.Time) {
		mu.Lock()
		if _, ok := committed[id]; !ok {
			committed[id] = at
		}
		mu.Unlock()
	}
	if c.Kind != kindRaw {
		if err := b.dbFor(c).installProbe(ctx, b.o.probe); err != nil {
			return res, err
		}
		defer func() { _ = b.dbFor(c).removeProbe(context.WithoutCancel(ctx)) }()
		conn, err := pgx.Connect(ctx, b.dbFor(c).url)
		if err != nil {
			return res, err
		}
		wctx, cancel := context.WithCancel(ctx)
		watched := make(chan struct{})
		defer func() {
			cancel()
			<-watched
			conn.Close(context.WithoutCancel(ctx))
		}()
		if b.o.probe == probeNotify {
			if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
				return res, err
			}
			go func() {
				defer close(watched)
				for {
					n, err := conn.WaitForNotification(wctx)
					if err != nil {
						return
					}
					at := time.Now()
					if id, err := uuid.Parse(n.Payload); err == nil {
						record(id, at)
					}
				}
			}()
		} else {
			go func() {
				defer close(watched)
				pollCommits(wctx, conn, record)
			}()
		}
	}
	latencyFile := ""
	if c.Kind == kindRaw {
		latencyFile = filepath.Join(b.tmp, "raw-latency.txt")
	}
	p, err := b.start(c, queue, "latency", 0, latencyFile, "")
	if err != nil {
		return res, err
	}
	defer func() { _ = p.stop(30 * time.Second) }()
	// Wait until every consumer is registered, then a little more.
	until := time.Now().Add(2 * time.Minute)
	for {
		if err := p.running(); err != nil {
			return res, err
		}
		_, consumers, err := b.brk.depth(queue)
		if err != nil {
			return res, err
		}
		if consumers >= b.expectedConsumers(c) {
			break
		}
		if time.Now().After(until) {
			return res, fmt.Errorf("%s: consumers not up after 2 minutes", c.Name)
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
	sleepCtx(ctx, 500*time.Millisecond)

	sent, measureFrom, lastSent, err := b.publishAtRate(ctx, queue)
	if err != nil {
		return res, err
	}
	if len(sent) == 0 {
		return res, fmt.Errorf("latency: nothing measured: duration too short")
	}
	res.Rate = float64(len(sent)-1) / lastSent.Sub(measureFrom).Seconds()

	var lat []time.Duration
	if c.Kind == kindRaw {
		// Let it ack the tail, then stop it so that it writes its samples.
		until := time.Now().Add(30 * time.Second)
		for {
			ready, _, err := b.brk.depth(queue)
			if err != nil {
				return res, err
			}
			if ready == 0 || time.Now().After(until) {
				break
			}
			sleepCtx(ctx, 50*time.Millisecond)
		}
		sleepCtx(ctx, time.Second)
		if err := p.stop(30 * time.Second); err != nil {
			return res, err
		}
		if lat, err = readRawSamples(latencyFile, measureFrom); err != nil {
			return res, err
		}
		if len(lat) < len(sent) {
			return res, fmt.Errorf("raw: %d of %d measured messages acked", len(lat), len(sent))
		}
	} else {
		until := time.Now().Add(60 * time.Second)
		for {
			mu.Lock()
			missing := 0
			for id := range sent {
				if _, ok := committed[id]; !ok {
					missing++
				}
			}
			mu.Unlock()
			if missing == 0 {
				break
			}
			if err := p.running(); err != nil {
				return res, err
			}
			if time.Now().After(until) {
				return res, fmt.Errorf("%s: %d of %d measured events not committed 60s after publishing ended", c.Name, missing, len(sent))
			}
			sleepCtx(ctx, 100*time.Millisecond)
		}
		mu.Lock()
		for id, at := range sent {
			lat = append(lat, committed[id].Sub(at))
		}
		mu.Unlock()
		if p.metricsURL != "" {
			// Keep platformd's own view (batch sizes and durations) for
			// diagnosis.
			_ = saveMetrics(ctx, p.metricsURL, filepath.Join(b.tmp, c.Name+"-latency.metrics"))
		}
		if err := p.stop(30 * time.Second); err != nil {
			return res, err
		}
	}
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	res.Samples = len(lat)
	res.P50ms, res.P90ms, res.P99ms = ms(percentile(lat, 50)), ms(percentile(lat, 90)), ms(percentile(lat, 99))
	res.P999ms, res.MaxMs = ms(percentile(lat, 99.9)), ms(lat[len(lat)-1])
	return res, nil
}

// publishAtRate publishes fresh single-copy events to queue at
// o.latencyRate for warm-up + duration, each with occurred_at set to its
// publish instant, spaced evenly (an absolute schedule, so the rate holds
// even when one publish is late). It returns the publish instant of each
// event published after the warm-up, by order id.
func (b *bench) publishAtRate(ctx context.Context, queue string) (map[uuid.UUID]time.Time, time.Time, time.Time, error) {
	conn, err := b.brk.connection()
	if err != nil {
		return nil, time.Time{}, time.Time{}, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, time.Time{}, time.Time{}, err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return nil, time.Time{}, time.Time{}, err
	}
	n := int(float64(b.o.latencyRate) * (b.o.latencyWarmup + b.o.latencyDuration).Seconds())
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, n+1))
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	products := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	interval := time.Second / time.Duration(b.o.latencyRate)
	sent := make(map[uuid.UUID]time.Time, n)
	start := time.Now()
	measureFrom := start.Add(b.o.latencyWarmup)
	var last time.Time
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d) //nolint:forbidigo // the load generator's pacing: the scenario, not a wait
		}
		id, err := uuid.NewV7()
		if err != nil {
			return nil, time.Time{}, time.Time{}, err
		}
		orderID := uuid.New()
		now := time.Now()
		body, err := orderBody(id, orderID, uuid.New(), b.wl.lines, products, rng, now)
		if err != nil {
			return nil, time.Time{}, time.Time{}, err
		}
		if err := ch.PublishWithContext(ctx, "", queue, false, false, publishing(body)); err != nil {
			return nil, time.Time{}, time.Time{}, err
		}
		if !now.Before(measureFrom) {
			sent[orderID] = now
			last = now
		}
	}
	timeout := time.After(30 * time.Second)
	for range n {
		select {
		case c := <-confirms:
			if !c.Ack {
				return nil, time.Time{}, time.Time{}, fmt.Errorf("latency: publish %d nacked", c.DeliveryTag)
			}
		case <-timeout:
			return nil, time.Time{}, time.Time{}, fmt.Errorf("latency: publishes not confirmed within 30s")
		}
	}
	return sent, measureFrom, last, nil
}

// pollCommits reads the probe table's new rows every 2 ms until ctx ends.
// Keys are handed out at insert time and become visible at commit, not in
// key order, so it reads from a low-water mark below which every key has
// been seen (a key missing for 2 s, a rolled-back insert, is given up).
func pollCommits(ctx context.Context, conn *pgx.Conn, record func(uuid.UUID, time.Time)) {
	var low int64 // every key <= low seen
	seen := map[int64]bool{}
	var gapSince time.Time
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rows, err := conn.Query(ctx, "SELECT seq, order_id FROM bench_commit WHERE seq > $1", low)
		if err != nil {
			return
		}
		var seq int64
		var id uuid.UUID
		var fresh []uuid.UUID
		_, err = pgx.ForEachRow(rows, []any{&seq, &id}, func() error {
			if !seen[seq] {
				seen[seq] = true
				fresh = append(fresh, id)
			}
			return nil
		})
		if err != nil {
			return
		}
		at := time.Now()
		for _, id := range fresh {
			record(id, at)
		}
		for seen[low+1] {
			delete(seen, low+1)
			low++
		}
		switch {
		case len(seen) == 0:
			gapSince = time.Time{}
		case gapSince.IsZero():
			gapSince = at
		case at.Sub(gapSince) > 2*time.Second:
			low++ // give the oldest missing key up
			gapSince = time.Time{}
		}
	}
}

// readRawSamples reads the raw contender's "<occurred ns> <ack ns>" lines
// and returns the latencies of messages published from measureFrom on.
func readRawSamples(path string, measureFrom time.Time) ([]time.Duration, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	from := measureFrom.UnixNano()
	var out []time.Duration
	s := bufio.NewScanner(f)
	for s.Scan() {
		var occurred, acked int64
		if _, err := fmt.Sscan(s.Text(), &occurred, &acked); err != nil {
			return nil, fmt.Errorf("raw samples: %w", err)
		}
		if occurred >= from {
			out = append(out, time.Duration(acked-occurred))
		}
	}
	return out, s.Err()
}
