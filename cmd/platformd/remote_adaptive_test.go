package main_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// capacityHandler is the stock handler with a capacity: it answers 429 to
// a call beyond capacity calls at once, and takes serviceTime per call, as
// a dependency that can serve so many and no more.
type capacityHandler struct {
	stock       *stockHandler
	capacity    int64
	serviceTime time.Duration
	inFlight    atomic.Int64
	most        atomic.Int64 // calls served at once, at most
	served      atomic.Int64
	refused     atomic.Int64
}

func (c *capacityHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	if n > c.capacity {
		c.refused.Add(1)
		http.Error(w, "busy", http.StatusTooManyRequests)
		return
	}
	for m := c.most.Load(); n > m && !c.most.CompareAndSwap(m, n); m = c.most.Load() {
	}
	time.Sleep(c.serviceTime) //nolint:forbidigo // the dependency's service time: the scenario, not a wait
	c.stock.serve(w, r)
	c.served.Add(1)
}

// A remote handler with concurrency: adaptive, end to end through the
// release binary: eight workers call a dependency that serves three calls at
// once and answers 429 beyond. The limit comes down to what it serves and
// stays under it (a 429 halves it, the level that overloaded it is
// remembered), so refusals stay a small part of the calls; every event is
// applied once and none is failed. With a fixed limit of eight, most calls
// would be refused for the whole run.
func TestRemoteHandlerAdaptsToItsCapacity(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := &capacityHandler{stock: &stockHandler{t: t, asked: map[string][]int{}}, capacity: 3, serviceTime: 20 * time.Millisecond}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	path := e.remoteConfig(t, srv.URL+"/handle", "2s")
	cfg, err := os.ReadFile(path)
	require.NoError(t, err)
	text := strings.Replace(string(cfg), "        timeout: 2s\n", "        timeout: 2s\n        max_in_flight: 16\n        concurrency: adaptive\n", 1)
	text = strings.Replace(text, "        concurrency: 2\n        batch: {size: 50, wait: 2ms}\n", "        concurrency: 8\n        batch: {size: 10, wait: 2ms}\n", 1)
	require.NotEqual(t, string(cfg), text)
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	d := e.start(t, path)

	reservations := func() int { return count(t, e.stockDSN, `SELECT count(*) FROM reservation`) }
	sent := e.publishOrders(t, 1500, 0)
	require.Eventually(t, func() bool { return reservations() == sent }, 3*time.Minute, 50*time.Millisecond, "logs:\n%s", d.stderr)
	require.Equal(t, sent, count(t, e.stockDSN, `SELECT count(*) FROM processed_event`), "each event applied once")
	require.Zero(t, count(t, e.stockDSN, `SELECT count(*) FROM platform.failed_event`), "a 429 costs no attempt: nothing fails")

	served, refused := c.served.Load(), c.refused.Load()
	limit := metric(t, e.metrics, `platformd_remote_handler_limit{handler="stock.reserve_remote",service="stock"}`)
	t.Logf("%d events: %d calls served (at most %d at once), %d refused; the limit is %.0f", sent, served, c.most.Load(), refused, limit)
	require.LessOrEqual(t, c.most.Load(), c.capacity)
	require.Positive(t, limit)
	require.LessOrEqual(t, limit, float64(c.capacity), "the limit settles at what the dependency serves, or under")
	require.Less(t, float64(refused), 0.1*float64(served), "refusals stay a small part of the calls")
	require.NoError(t, d.terminate(t), "logs:\n%s", d.stderr)
}
