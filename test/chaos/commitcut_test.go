package chaos

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
)

// TestChaosCommitCut loses the daemon's database connection right after
// it sent COMMIT, while the server commits: what a client sees when its
// server is killed or fails over mid-commit, with the one outcome that
// makes a wrong ack lose nothing visible and a wrong retry apply twice.
// The daemon cannot know the outcome: it must not ack the batch, and the
// redelivery must meet the processed_event rows (duplicates of source
// redelivery) so that every event is applied exactly once. The server is
// the shared one, reached through the suite's TCP proxy, which cuts the
// session (it does not kill the server).
func TestChaosCommitCut(t *testing.T) {
	t.Parallel() // a world of its own: see doc.go
	rng := seedRNG(t)
	n, dur := 2400, 14*time.Second
	if testing.Short() {
		n, dur = 1200, 9*time.Second
	}
	e := newEnv(t)
	px := newProxy(t, pgAddr(t))
	d := e.newDaemon(daemonOpts{name: "solo", dbAddr: px.addr()})
	d.migrate()
	pl := newPlan(rng, n, e)
	stats := &pubStats{}
	prod := newProducer(e, pl, rng, dur, stats)
	dbT0 := e.dbNow()
	d.start()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &chaos{t: t, ctx: ctx, e: e, a: d, prod: prod, rng: rng, t0: time.Now()}
	c.waitPools(d, adminv1.PoolState_POOL_STATE_RUNNING, 30*time.Second)
	go prod.run(ctx)
	waitUntil(30*time.Second, func() bool { return prod.published() > n/5 })

	// Three cut commits on the stock database, one on the shipping one,
	// one at a time, while events flow. A cut waits for its COMMIT up to
	// cutWait: the shipping database sees a fifth of the traffic, and
	// beside the rest of the suite on two cores its pool can wait long
	// for the cores.
	const cutWait = time.Minute
	cuts := map[string]int{}
	for _, db := range []string{e.stockDB, e.stockDB, e.shipDB, e.stockDB} {
		tags := px.cutAfterCommit(1, db)
		select {
		case tag := <-tags:
			cuts[tag]++
			c.logf("cut a session of %s right after its COMMIT; the server answered %q", db, tag)
		case <-time.After(cutWait):
			// Say what the pools did meanwhile: a pool that applied
			// nothing was starved, one that did committed nothing the
			// proxy could cut (no event recorded, or savepoints used).
			var pools []string
			for _, name := range []string{poolStock, poolShip} {
				if p, err := d.poolInfo(name); err == nil {
					pools = append(pools, fmt.Sprintf("%s %s, %d processed, %d failed", name, p.GetState(), p.GetProcessed(), p.GetFailed()))
				}
			}
			t.Fatalf("no COMMIT on %s within %s to cut; %d events published; pools: %s", db, cutWait, prod.published(), strings.Join(pools, "; "))
		}
		c.requireProgress(c.progress(), "a cut commit")
		_ = sleepCtx(ctx, time.Duration(300+rng.IntN(700))*time.Millisecond)
	}
	if cuts["COMMIT"] == 0 {
		t.Fatalf("no cut transaction committed (answers %v): the test proves nothing", cuts)
	}

	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	if err := prod.wait(wctx); err != nil {
		t.Fatalf("producer: %v", err)
	}
	if last, ok := e.quiesce(pl, dbT0, 2*time.Minute); !ok {
		t.Errorf("not quiescent after 2m: %s", last)
	} else {
		c.logf("quiescent: %s", last)
	}
	batchErrors, err := d.metricSum("platformd_batch_errors_total")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	d.finalScrape()
	d.stop()

	r := e.check(pl, &seeds{})
	for _, p := range r.Problems {
		t.Error(p)
	}
	m := e.totals()
	// Each cut batch was requeued whole, not acked: its events came back
	// as redeliveries, and those that had committed met their rows.
	total := 0
	for _, k := range cuts {
		total += k
	}
	if int(batchErrors) < total {
		t.Errorf("platformd_batch_errors_total = %v after %d cut commits: a batch of unknown outcome was settled", batchErrors, total)
	}
	if m.dupBySource["redelivery"] < float64(cuts["COMMIT"]) {
		t.Errorf("%v redelivered duplicates after %d committed batches cut off: their redeliveries did not meet the rows", m.dupBySource["redelivery"], cuts["COMMIT"])
	}
	t.Logf("chaos: commit cut: cut commits: %v, batches of unknown outcome: %v, events: %d, deliveries: %d, duplicates skipped: %d (redelivery %v), applied twice: %d, lost: %d, bad inputs quarantined: %d/%d",
		cuts, batchErrors, r.Events, r.Applied+int(m.duplicate), int(m.duplicate), m.dupBySource["redelivery"], r.Twice, r.Lost, r.BadQuarantined, r.BadTotal)
}

// metricSum adds up every series of one metric family on d's endpoint.
func (d *daemon) metricSum(name string) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.metricsAddr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("metrics: %s", resp.Status)
	}
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum, sc.Err()
}
