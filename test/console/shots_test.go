package console_test

import (
	"context"
	"encoding/json"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/testenv"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/fixture/shop"
)

// shotsLoad is how long the shots scenario feeds the pools before the
// first screenshot, so that the charts have a shape.
const shotsLoad = 25 * time.Second

// TestConsoleShots writes screenshots of the main pages, at 1280 px and at
// phone width (390 px), to $CONSOLE_SHOTS (make console-shots), after a
// realistic half minute: a varying load with duplicates, quarantined and
// invalid messages, a paused pool, a horizon change and a dry run.
func TestConsoleShots(t *testing.T) {
	dir := os.Getenv("CONSOLE_SHOTS")
	if dir == "" {
		t.Skip("set CONSOLE_SHOTS=DIR to write screenshots (make console-shots)")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	b := newBrowser(t, 1280, 900)
	e := newEnv(t, options{sampleEvery: "1s"})
	ctx := b.ctx
	signIn(t, ctx, e, adminToken)
	waitFor(t, ctx, "document.querySelectorAll('[data-state]').length === 2 && "+
		"[...document.querySelectorAll('[data-state]')].every(n => n.textContent === 'running')", "pools running")

	// Load: orders at a rate that swells and ebbs, every 10th published
	// twice (a relay republish), status changes for shipping.
	loadCtx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { feed(loadCtx, t, e) })
	defer func() { stopLoad(); wg.Wait() }()

	old1 := e.publish(shop.EventOrderPlaced, order(), oldEventID(400*time.Hour))
	e.publish(shop.EventOrderPlaced, order(), oldEventID(500*time.Hour))
	bad := order()
	bad.Lines[0].Quantity = "-1"
	e.publish(shop.EventOrderPlaced, bad, uuid.Nil)
	time.Sleep(shotsLoad) //nolint:forbidigo // the load runs meanwhile: this is the scenario's length, not a wait for a result
	stopLoad()
	wg.Wait()

	// A history: rows processed weeks ago, as a service that has run for
	// a while has; shipping's are purged for real.
	backdate(t, e.stockDSN, 12345, 40*24*time.Hour)
	backdate(t, e.shipDSN, 2750, 20*24*time.Hour)
	ops := e.operator().signIn(adminToken)
	_, _ = ops.post("/services/shipping/purge", url.Values{"confirm": {"1"}})
	_, _ = ops.post("/pools/"+e.shipPool+"/pause", url.Values{"reason": {"carrier API outage (INC-2231)"}})
	_, _ = ops.post("/services/stock/horizon", url.Values{"horizon": {"30d"}})
	_, _ = ops.post("/services/stock/purge", url.Values{"dry_run": {"1"}})
	_, _ = ops.post("/pools/"+e.stockPool+"/retry", url.Values{"event_id": {old1.String()}, "override": {"1"}, "confirm": {"override"}})
	require.Eventually(t, func() bool { return processed(t, e.stockDSN, old1) }, 30*time.Second, 50*time.Millisecond)
	stored := e.waitFailedEvents(e.stockDSN, 2, "failed")

	shoot := func(name, path string, prepare ...chromedp.Action[chromedp.Void]) {
		for _, w := range []struct {
			width, height int64
			mobile        bool
		}{{1280, 900, false}, {390, 844, true}} {
			opts := []chromedp.EmulateViewportOption{}
			if w.mobile {
				opts = append(opts, chromedp.EmulateMobile)
			}
			steps := append([]chromedp.Action[chromedp.Void]{chromedp.EmulateViewport(w.width, w.height, opts...), chromedp.Navigate(e.url(path))}, prepare...)
			do(t, ctx, steps...)
			waitFor(t, ctx, "document.readyState === 'complete'", name+" loaded")
			png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
			require.NoError(t, err)
			file := filepath.Join(dir, name+"-"+itoa(w.width)+".png")
			require.NoError(t, os.WriteFile(file, png, 0o644))
			t.Logf("wrote %s", file)
		}
	}
	shoot("overview", "/")
	shoot("pool", "/pools/"+e.stockPool)
	shoot("service", "/services/stock", chromedp.Click(chromedp.CSS("#dry-run-button")), chromedp.WaitVisible(chromedp.CSS("#dry-run")))
	shoot("lookup", "/lookup?event_id="+old1.String())
	shoot("audit", "/audit")
	shoot("failures", "/services/stock/failures")
	shoot("failure-list", "/services/stock/failures/events?state=any")
	for _, f := range stored {
		if f.State == "failed" {
			shoot("failure", "/failures/"+f.ID.String())
			break
		}
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// feed publishes orders and status changes until ctx ends, at 5 to 45
// orders a second along a sine of period 20 s.
func feed(ctx context.Context, t *testing.T, e *env) {
	conn, err := amqp.Dial(testenv.AMQPURL())
	if err != nil {
		t.Errorf("feed: %v", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Errorf("feed: %v", err)
		return
	}
	start := time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var n int
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rate := 25 + 20*math.Sin(2*math.Pi*time.Since(start).Seconds()/20)
		for range int(rate / 20) {
			n++
			body := encode(t, shop.EventOrderPlaced, order())
			copies := 1
			if n%10 == 0 {
				copies = 2
			}
			for range copies {
				_ = ch.PublishWithContext(ctx, e.exchange, shop.EventOrderPlaced, false, false,
					amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
			}
			if n%4 == 0 {
				status := encode(t, shop.EventOrderStatusChanged, shop.OrderStatusChanged{OrderID: uuid.New(), Status: "shipped", Version: 1})
				_ = ch.PublishWithContext(ctx, e.exchange, shop.EventOrderStatusChanged, false, false,
					amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: status})
			}
		}
	}
}

func encode(t *testing.T, name string, payload any) []byte {
	raw, err := json.Marshal(payload)
	require.NoError(t, err)
	body, err := envelope.Encode(envelope.Envelope{EventID: uuid.Must(uuid.NewV7()), EventName: name, OccurredAt: time.Now().UTC(), Payload: raw})
	require.NoError(t, err)
	return body
}

// backdate inserts n processed_event rows processed age ago.
func backdate(t *testing.T, dsn string, n int, age time.Duration) {
	db, err := pgxpool.New(context.Background(), dsn)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(context.Background(), `INSERT INTO processed_event (event_id, processed_at)
		SELECT gen_random_uuid(), now() - $2::interval - (i * interval '1 second') FROM generate_series(1, $1) AS i`,
		n, age)
	require.NoError(t, err)
	_, err = db.Exec(context.Background(), `ANALYZE processed_event`)
	require.NoError(t, err)
}
