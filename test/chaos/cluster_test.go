package chaos

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
)

// clusterScript starts, stops, partitions and queries the three extra
// RabbitMQ nodes (relative to this package's directory, where go test
// runs).
const clusterScript = "../../scripts/rabbitmq-cluster.sh"

// rmqCluster drives the nodes of scripts/rabbitmq-cluster.sh.
type rmqCluster struct {
	t     *testing.T
	nodes []string // base AMQP URL of node i+1

	mu  sync.Mutex
	off map[int]bool // nodes stopped or cut off: rabbitmqctl goes elsewhere
}

// script runs the cluster script with args.
func (c *rmqCluster) script(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", append([]string{clusterScript}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("rabbitmq-cluster.sh %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ctl runs rabbitmqctl on the first node, not stopped or cut off on
// purpose, that runs it (a node can also pause by itself, when it counts
// itself in a minority).
func (c *rmqCluster) ctl(args ...string) (string, error) {
	c.mu.Lock()
	var try []int
	for n := 1; n <= len(c.nodes); n++ {
		if !c.off[n] {
			try = append(try, n)
		}
	}
	c.mu.Unlock()
	var out string
	var err error
	for _, n := range try {
		if out, err = c.script(append([]string{"ctl", strconv.Itoa(n)}, args...)...); err == nil {
			return out, nil
		}
	}
	return out, err
}

func (c *rmqCluster) setOff(n int, off bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off[n] = off
}

// addr is node n's host:port, as the daemons report it.
func (c *rmqCluster) addr(n int) string {
	u, err := url.Parse(c.nodes[n-1])
	if err != nil {
		c.t.Fatalf("node %d url: %v", n, err)
	}
	return u.Host
}

// nodeOf returns the node of addr (0 if none).
func (c *rmqCluster) nodeOf(addr string) int {
	for n := 1; n <= len(c.nodes); n++ {
		if c.addr(n) == addr {
			return n
		}
	}
	return 0
}

// leader returns the node holding the leader of a quorum queue.
func (c *rmqCluster) leader(vhost, queue string) (int, error) {
	out, err := c.ctl("list_queues", "-p", vhost, "--quiet", "--no-table-headers", "name", "leader")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == queue {
			for n := 1; n <= len(c.nodes); n++ {
				if f[1] == fmt.Sprintf("rabbit-c%d@localhost", n) {
					return n, nil
				}
			}
			return 0, fmt.Errorf("queue %s: leader %q is no node of the cluster", queue, f[1])
		}
	}
	return 0, fmt.Errorf("queue %s not listed: %s", queue, out)
}

// running returns how many nodes the cluster counts as running.
func (c *rmqCluster) running() int {
	out, err := c.ctl("-q", "eval", "length(rabbit_nodes:all_running()).")
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(out))
	return n
}

// newCluster checks that the cluster of scripts/rabbitmq-cluster.sh is up
// (make chaos-cluster starts it).
func newCluster(t *testing.T) *rmqCluster {
	t.Helper()
	c := &rmqCluster{t: t, off: map[int]bool{}}
	out, err := c.script("urls")
	if err != nil {
		t.Fatal(err)
	}
	c.nodes = strings.Split(strings.TrimSpace(out), ",")
	if len(c.nodes) != 3 {
		t.Fatalf("rabbitmq-cluster.sh urls: %q, want 3 URLs", out)
	}
	if n := c.running(); n != 3 {
		t.Fatalf("the RabbitMQ cluster has %d running nodes, want 3: run `bash scripts/rabbitmq-cluster.sh start` (make chaos-cluster does)", n)
	}
	return c
}

// clusterChaos is one run of TestChaosBrokerCluster.
type clusterChaos struct {
	*chaos
	rc *rmqCluster

	faultsBy  map[string]int
	failovers []failoverSample
}

// failoverSample is how long one pool took, from its node's loss, to
// commit a batch consumed through another node.
type failoverSample struct {
	fault, daemon, pool string
	from, to            string
	took                time.Duration
}

// TestChaosBrokerCluster runs two daemons on a three-node RabbitMQ cluster
// with quorum queues, under load, and loses nodes: it stops the node
// holding the stock queue's leader (rabbitmqctl stop, as in a rolling
// upgrade) and starts it again, kills another (SIGKILL of its VM, a crash)
// and starts it again, cuts a third off the others (iptables on the
// loopback distribution ports; the cluster pauses it, pause_minority) and
// heals the cut, and in between SIGKILLs a daemon and force-closes the
// vhost's connections. Every good event must be applied exactly once and
// every bad one quarantined, and for every pool on a lost node the time
// from the loss to its first commit through another node is measured.
// It needs the cluster of scripts/rabbitmq-cluster.sh and runs with
// CHAOS_CLUSTER=1 (make chaos-cluster).
func TestChaosBrokerCluster(t *testing.T) {
	if os.Getenv("CHAOS_CLUSTER") != "1" {
		t.Skip("set CHAOS_CLUSTER=1 with the cluster of scripts/rabbitmq-cluster.sh running (make chaos-cluster)")
	}
	rng := seedRNG(t)
	rc := newCluster(t)
	n, dur := 9000, 100*time.Second
	if testing.Short() {
		n, dur = 4500, 70*time.Second
	}
	// Registered first, so run last: what the nodes logged, should the
	// test fail (make chaos-cluster removes the nodes afterwards).
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := rc.script("logs")
			t.Logf("RabbitMQ nodes' logs:\n%s", out)
		}
	})
	e := newEnvOn(t, broker{urls: rc.nodes, ctl: rc.ctl})
	// Whatever happens, leave every node running and nothing cut.
	t.Cleanup(func() {
		if _, err := rc.script("heal"); err != nil {
			t.Logf("cleanup: %v", err)
		}
		for i := 1; i <= 3; i++ {
			if _, err := rc.script("node-start", strconv.Itoa(i)); err != nil {
				t.Logf("cleanup: %v", err)
			}
		}
	})
	a := e.newDaemon(daemonOpts{name: "a", dbAddr: pgAddr(t)})
	b := e.newDaemon(daemonOpts{name: "b", dbAddr: pgAddr(t)})
	a.migrate()
	stats := &pubStats{}
	pl := newPlan(rng, n, e)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &clusterChaos{
		chaos: &chaos{t: t, ctx: ctx, e: e, a: a, b: b, stats: stats, rng: rng, t0: time.Now(),
			sc: scale{gapMin: time.Second, gapMax: 2 * time.Second}},
		rc: rc, faultsBy: map[string]int{},
	}
	dbT0 := e.dbNow()
	c.prod = newProducer(e, pl, rng, dur, stats)
	a.start()
	b.start()
	c.waitPools(a, adminv1.PoolState_POOL_STATE_RUNNING, 30*time.Second)
	c.waitPools(b, adminv1.PoolState_POOL_STATE_RUNNING, 30*time.Second)
	c.logf("daemons on the cluster: a %s, b %s", c.placement(a), c.placement(b))
	go c.prod.run(ctx)
	c.logf("producing %d good events and %d bad inputs over ~%s", len(pl.goods), len(pl.bad), dur)
	waitUntil(30*time.Second, func() bool { return c.prod.published() > 300 })

	// 1. The node holding the stock queue's leader, stopped as in a
	// rolling upgrade, then started again.
	leader, err := rc.leader(e.vhost, e.stockQ)
	if err != nil {
		t.Fatal(err)
	}
	c.loseNode("stop", leader, func() error {
		_, err := rc.script("node-stop", strconv.Itoa(leader))
		return err
	})
	c.logf("stock queue leader after the stop: %s", c.leaderName(e.stockQ))
	c.restoreNode(leader, "node-start")

	c.gap()
	c.killRestart(b)
	c.faultsBy["daemon SIGKILLs"]++
	c.gap()

	// 2. Another node, crashed: SIGKILL of its VM.
	other := c.busiest(leader)
	c.loseNode("kill", other, func() error {
		_, err := rc.script("node-kill", strconv.Itoa(other))
		return err
	})
	c.restoreNode(other, "node-start")

	c.gap()
	c.closeAll()
	c.faultsBy["forced connection closes"]++
	c.gap()

	// 3. A node cut off from the other two, then healed.
	cut := c.busiest(0)
	method, err := rc.script("partition-method")
	if err != nil {
		t.Fatal(err)
	}
	c.loseNode("partition", cut, func() error {
		_, err := rc.script("partition", strconv.Itoa(cut))
		return err
	})
	c.logf("node %d cut off with %s; healing", cut, strings.TrimSpace(method))
	c.restoreNode(cut, "heal")

	wctx, wcancel := context.WithTimeout(ctx, 3*time.Minute)
	defer wcancel()
	if err := c.prod.wait(wctx); err != nil {
		t.Fatalf("producer: %v", err)
	}
	c.logf("producer done")
	if last, ok := e.quiesce(pl, dbT0, 2*time.Minute); !ok {
		t.Errorf("not quiescent after 2m: %s", last)
	} else {
		c.logf("quiescent: %s", last)
	}
	c.listFailed()
	for _, d := range []*daemon{a, b} {
		d.finalScrape()
		d.stop()
	}

	r := e.check(pl, &seeds{})
	if n := stats.returned.Load(); n > 0 {
		r.Problem("%d published messages were unroutable", n)
	}
	for _, p := range r.Problems {
		t.Error(p)
	}
	if len(c.failovers) == 0 {
		t.Errorf("no pool was on a lost node: no failover measured")
	}
	var took []time.Duration
	byKind := map[string][]time.Duration{}
	for _, s := range c.failovers {
		took = append(took, s.took)
		byKind[s.fault] = append(byKind[s.fault], s.took)
		t.Logf("failover: %s of %s: %s on %s, first commit through %s after %s", s.fault, s.from, s.pool, s.daemon, s.to, s.took.Round(time.Millisecond))
	}
	slices.Sort(took)
	var perKind []string
	for _, k := range []string{"stop", "kill", "partition"} {
		d := byKind[k]
		slices.Sort(d)
		perKind = append(perKind, fmt.Sprintf("%s %d pools, median %s, max %s", k, len(d), median(d).Round(time.Millisecond), maxOf(d).Round(time.Millisecond)))
	}
	kinds := make([]string, 0, len(c.faultsBy))
	for _, k := range []string{"broker nodes stopped", "broker nodes killed", "partitions", "daemon SIGKILLs", "forced connection closes"} {
		kinds = append(kinds, fmt.Sprintf("%s: %d", k, c.faultsBy[k]))
	}
	m := e.totals()
	summary := fmt.Sprintf("faults: %d (%s), events: %d, deliveries: %d, duplicates skipped: %d, applied twice: %d, lost: %d, bad inputs quarantined: %d/%d, failover to the first commit on another node (%d pools): median %s, max %s",
		c.faults, strings.Join(kinds, ", "), r.Events, r.Applied+int(m.duplicate), int(m.duplicate), r.Twice, r.Lost, r.BadQuarantined, r.BadTotal,
		len(took), median(took).Round(time.Millisecond), maxOf(took).Round(time.Millisecond))
	t.Log("chaos: cluster: " + summary)
	t.Log("chaos: cluster: failover by kind of loss: " + strings.Join(perKind, "; "))
	t.Logf("chaos: cluster: copies sent: %d originals, %d relay republishes, %d replays, %d resent after broker failures; duplicates by source (metrics): %v; retried (metrics): %d; failure rows %d (copies %d)",
		stats.originals.Load(), stats.republished.Load(), stats.replayed.Load(), stats.resent.Load(), m.dupBySource, int(m.retried), r.FailureRows, r.FailureCopies)
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	if len(d)%2 == 1 {
		return d[len(d)/2]
	}
	return (d[len(d)/2-1] + d[len(d)/2]) / 2
}

func maxOf(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return slices.Max(d)
}

// placement describes which node each of d's pools is on.
func (c *clusterChaos) placement(d *daemon) string {
	pools, err := c.pools(d)
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, p := range pools {
		parts = append(parts, fmt.Sprintf("%s on node %d", p.GetName(), c.rc.nodeOf(p.GetBrokerNode())))
	}
	return strings.Join(parts, ", ")
}

func (c *clusterChaos) pools(d *daemon) ([]*adminv1.Pool, error) {
	ctx, cancel := c.e.readCtx()
	defer cancel()
	resp, err := d.adminClient().ListPools(ctx, &adminv1.ListPoolsRequest{})
	if err != nil {
		return nil, err
	}
	return resp.GetPools(), nil
}

// busiest returns the node, other than skip, that the most pools of both
// daemons are on: losing it moves the most pools.
func (c *clusterChaos) busiest(skip int) int {
	count := map[int]int{}
	for _, d := range []*daemon{c.a, c.b} {
		pools, err := c.pools(d)
		if err != nil {
			c.t.Fatalf("ListPools on %s: %v", d.name, err)
		}
		for _, p := range pools {
			count[c.rc.nodeOf(p.GetBrokerNode())]++
		}
	}
	best := 0
	for n := 1; n <= 3; n++ {
		if n != skip && (best == 0 || count[n] > count[best]) {
			best = n
		}
	}
	return best
}

func (c *clusterChaos) leaderName(queue string) string {
	n, err := c.rc.leader(c.e.vhost, queue)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("node %d", n)
}

// watched is one pool on the node being lost.
type watched struct {
	d        *daemon
	pool     string
	baseline uint64 // settled count once on another node
	moved    bool
	to       string
	done     bool
}

func settled(p *adminv1.Pool) uint64 {
	return p.GetProcessed() + p.GetDuplicates() + p.GetRetried() + p.GetFailed()
}

// loseNode records which pools are on node n, loses the node with inject,
// and measures for each of those pools the time from the loss to its
// first commit through another node: the pool reports another node, then
// its count of settled deliveries grows (a settlement on the new
// connection follows a commit; none can come from the lost one).
func (c *clusterChaos) loseNode(kind string, n int, inject func() error) {
	t := c.t
	t.Helper()
	addr := c.rc.addr(n)
	var ws []*watched
	for _, d := range []*daemon{c.a, c.b} {
		pools, err := c.pools(d)
		if err != nil {
			t.Fatalf("ListPools on %s: %v", d.name, err)
		}
		for _, p := range pools {
			if p.GetBrokerNode() == addr {
				ws = append(ws, &watched{d: d, pool: p.GetName()})
			}
		}
	}
	// As in a rolling upgrade: never lose a node that holds the last
	// in-sync copy a quorum needs (a node just back may still be catching
	// up).
	if !waitUntil(60*time.Second, func() bool {
		_, err := c.rc.script("queues", strconv.Itoa(n), "-q", "check_if_node_is_quorum_critical")
		return err == nil
	}) {
		t.Fatalf("node %d still quorum critical after 60s", n)
	}
	before := c.progress()
	// Every event already out: a pool that moves has nothing left to
	// commit through its new node (on a slow machine the faults can
	// outlast the producer's ~1m40s), so moving is all it can show.
	idle := c.prod.published() >= len(c.prod.pl.goods)
	c.rc.setOff(n, true)
	// The clock starts as the command starts (for a stop, the CLI's own
	// start-up counts as part of the loss) and the pools are watched
	// while it runs.
	t0 := time.Now()
	type injectResult struct {
		err  error
		took time.Duration
	}
	injected := make(chan injectResult, 1)
	go func() {
		err := inject()
		injected <- injectResult{err, time.Since(t0)}
	}()
	c.logf("node %d (%s) being lost (%s); %d pools are on it", n, addr, kind, len(ws))
	deadline := t0.Add(90 * time.Second)
	for left := len(ws); left > 0 && time.Now().Before(deadline); {
		for _, d := range []*daemon{c.a, c.b} {
			pools, err := c.pools(d)
			if err != nil {
				continue
			}
			now := time.Now()
			for _, w := range ws {
				if w.d != d || w.done {
					continue
				}
				for _, p := range pools {
					if p.GetName() != w.pool {
						continue
					}
					node := p.GetBrokerNode()
					switch {
					case !w.moved && node != "" && node != addr:
						w.moved, w.to, w.baseline = true, node, settled(p)
					case w.moved && node != w.to:
						w.moved = false // moved again before committing
					case w.moved && settled(p) > w.baseline:
						w.done = true
						left--
						c.failovers = append(c.failovers, failoverSample{fault: kind, daemon: d.name, pool: w.pool,
							from: fmt.Sprintf("node %d", n), to: fmt.Sprintf("node %d", c.rc.nodeOf(node)), took: now.Sub(t0)})
					}
				}
			}
		}
		if idle && !slices.ContainsFunc(ws, func(w *watched) bool { return !w.done && !w.moved }) {
			break // every pool moved, and none has anything left to commit
		}
		time.Sleep(50 * time.Millisecond) //nolint:forbidigo // a bounded poll of the pools' progress, the loop above holds the deadline
	}
	res := <-injected
	if res.err != nil {
		t.Fatal(res.err)
	}
	c.faults++
	switch kind {
	case "stop":
		c.faultsBy["broker nodes stopped"]++
	case "kill":
		c.faultsBy["broker nodes killed"]++
	case "partition":
		c.faultsBy["partitions"]++
	}
	c.logf("node %d lost (%s; the command took %.1fs)", n, kind, res.took.Seconds())
	for _, w := range ws {
		switch {
		case w.done:
		case idle && w.moved:
			c.logf("%s of node %d: pool %s on %s moved to %s; no commit to measure, the producer had published every event before the loss",
				kind, n, w.pool, w.d.name, w.to)
		default:
			t.Errorf("%s of node %d: pool %s on %s did not commit through another node within 90s (moved: %v)", kind, n, w.pool, w.d.name, w.moved)
		}
	}
	c.requireProgress(before, kind+" of node "+strconv.Itoa(n))
}

// restoreNode brings node n back (the script's node-start or heal) and
// waits until the cluster runs three nodes and every pool is running.
func (c *clusterChaos) restoreNode(n int, how string) {
	t := c.t
	t.Helper()
	start := time.Now()
	args := []string{how}
	if how == "node-start" {
		args = append(args, strconv.Itoa(n))
	}
	out, err := c.rc.script(args...)
	if err != nil {
		t.Fatal(err)
	}
	// The script restarts a node whose boot hung after the heal (RabbitMQ
	// 3.10.8 on Erlang 25.1 and later): the fault then included a restart.
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "restarting its VM") {
			c.logf("%s", strings.TrimSpace(line))
		}
	}
	// Back means running on node n itself too, and still so a moment later.
	back := func() bool {
		if c.rc.running() != 3 {
			return false
		}
		_, err := c.rc.script("ctl", strconv.Itoa(n), "-q", "await_startup", "--timeout", "5")
		return err == nil
	}
	if !waitUntil(90*time.Second, func() bool { return back() && sleepCtx(c.ctx, 2*time.Second) == nil && back() }) {
		t.Fatalf("node %d not back in the cluster 90s after %s", n, how)
	}
	c.rc.setOff(n, false)
	for _, d := range []*daemon{c.a, c.b} {
		c.waitPools(d, adminv1.PoolState_POOL_STATE_RUNNING, 30*time.Second)
	}
	c.logf("node %d back (%s) after %.1fs; a %s; b %s", n, how, time.Since(start).Seconds(), c.placement(c.a), c.placement(c.b))
}
