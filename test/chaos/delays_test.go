package chaos

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
)

// delaysServices are two services, each with one quorum pool bound to an
// event of its own and retry delays of its own that share 4s: a SQL
// handler that fails (SQLSTATE P0001, retried) while the event's attempt
// is below its payload's fail_until, then records the attempt it applied
// the event at and how many times.
const delaysServices = `  - name: alpha
    database: "{{ALPHA_DSN}}"
    migrations: {{MIGRATIONS}}
    sql_handlers:
      - name: alpha.apply
        events: [chaos.alpha.v1]
        sql:
          - "SELECT maybe_fail(@attempt, COALESCE((@payload->>'fail_until')::int, 0))"
          - "INSERT INTO applied (event_id, attempt, n) VALUES (@event_id, @attempt, 1) ON CONFLICT (event_id) DO UPDATE SET n = applied.n + 1"
    pools:
      - name: alpha-events
        queue: {{ALPHA_QUEUE}}
        queue_type: quorum
        bindings: [chaos.alpha.v1]
        handlers: [alpha.apply]
        concurrency: 2
        retry: {delays: [4s, 5s]}
  - name: beta
    database: "{{BETA_DSN}}"
    migrations: {{MIGRATIONS}}
    sql_handlers:
      - name: beta.apply
        events: [chaos.beta.v1]
        sql:
          - "SELECT maybe_fail(@attempt, COALESCE((@payload->>'fail_until')::int, 0))"
          - "INSERT INTO applied (event_id, attempt, n) VALUES (@event_id, @attempt, 1) ON CONFLICT (event_id) DO UPDATE SET n = applied.n + 1"
    pools:
      - name: beta-events
        queue: {{BETA_QUEUE}}
        queue_type: quorum
        bindings: [chaos.beta.v1]
        handlers: [beta.apply]
        concurrency: 2
        retry: {delays: [4s, 6s]}
`

const delaysMigration = `-- +goose Up
CREATE TABLE applied (event_id uuid PRIMARY KEY, attempt int NOT NULL, n int NOT NULL);
-- +goose StatementBegin
CREATE FUNCTION maybe_fail(attempt int, until int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF attempt < until THEN
    RAISE EXCEPTION 'attempt % of %: not yet', attempt, until USING ERRCODE = 'P0001';
  END IF;
END $$;
-- +goose StatementEnd
-- +goose Down
DROP FUNCTION maybe_fail(int, int);
DROP TABLE applied;
`

// TestChaosDelayedRetriesSurviveSIGKILL SIGKILLs the daemon while retries
// wait in the shared delay queues, twice (in the first delay, then in the
// second), and starts it again each time: the delay queues keep them and
// dead-letter each back, by its routing key, to its own pool's queue,
// daemon or not. Every event is applied once, in its own service only, at
// its last attempt for those that failed; no failure is stored and every
// queue ends empty. Two pools with different delays share the 4s queue.
func TestChaosDelayedRetriesSurviveSIGKILL(t *testing.T) {
	t.Parallel() // a world of its own: see doc.go
	n := 300     // per service: fail twice, then apply
	if testing.Short() {
		n = 100
	}
	delayedRetries(t, n, false)
}

// TestChaosDelayedRetriesSurviveABrokerRestart is the same run with the
// broker restarted too, after each SIGKILL, while the retries wait in the
// shared delay queues (quorum queues: on disk, their TTL running on): none
// is lost, each comes back to its own pool once. The restart (rabbitmqctl
// stop_app, start_app: every connection of the node closed, every queue
// recovered from disk) hits every user of the broker, so it runs only with
// CHAOS_BROKER_RESTART=1, and not in parallel with the other tests.
func TestChaosDelayedRetriesSurviveABrokerRestart(t *testing.T) {
	if os.Getenv("CHAOS_BROKER_RESTART") != "1" {
		t.Skip("set CHAOS_BROKER_RESTART=1 to restart the broker (it affects every user of the node)")
	}
	delayedRetries(t, 100, true)
}

// delayedRetries is the delayed retries' run: n events per service that
// fail twice and then apply, n/2 that apply at once, two SIGKILLs while
// retries wait, each followed by a broker restart if restartBroker.
func delayedRetries(t *testing.T, n int, restartBroker bool) {
	e := newEnv(t)
	plain := n / 2 // per service: apply at once, the load beside
	migrations := filepath.Join(e.dir, "migrations")
	if err := os.MkdirAll(migrations, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(migrations, "001_applied.sql"), []byte(delaysMigration), 0o600); err != nil {
		t.Fatal(err)
	}
	svcs := strings.NewReplacer("{{ALPHA_DSN}}", e.dsn(pgAddr(t), e.stockDB, ""), "{{BETA_DSN}}", e.dsn(pgAddr(t), e.shipDB, ""),
		"{{ALPHA_QUEUE}}", e.stockQ, "{{BETA_QUEUE}}", e.shipQ, "{{MIGRATIONS}}", strconv.Quote(migrations)).Replace(delaysServices)
	d := e.newDaemon(daemonOpts{name: "a", dbAddr: pgAddr(t), servicesYAML: svcs})
	d.migrate()
	d.start()

	ids := map[string][]string{} // event name -> ids published
	failing := map[string]bool{}
	conn, err := e.dialAMQP()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	// Published all at once, confirms awaited after: the retries must
	// still be waiting when the test looks.
	ctx := context.Background()
	var confirms []*amqp.DeferredConfirmation
	for i := range n + plain {
		for _, name := range []string{"chaos.alpha.v1", "chaos.beta.v1"} {
			id := uuid.NewString()
			payload := map[string]any{"i": i}
			if i < n {
				payload["fail_until"] = 2
				failing[id] = true
			}
			body, _ := json.Marshal(map[string]any{"event_id": id, "event_name": name, "occurred_at": time.Now().UTC().Format(time.RFC3339Nano), "payload": payload})
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, e.exchange, name, true, false,
				amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: id, Body: body})
			if err != nil {
				t.Fatalf("publish %s: %v", id, err)
			}
			confirms = append(confirms, dc)
			ids[name] = append(ids[name], id)
		}
	}
	for _, dc := range confirms {
		if !dc.Wait() {
			t.Fatal("a publish was not confirmed")
		}
	}

	// Kill while the first retries wait in the 4s queue, and again while
	// the second ones wait in 5s and 6s.
	for _, waitIn := range [][]string{{"platformd.retry.4s"}, {"platformd.retry.5s", "platformd.retry.6s"}} {
		if !waitUntil(2*time.Minute, func() bool { return e.queueDepths(conn, waitIn...) >= n/2 }) {
			applied, _ := e.count(e.stockDB, `SELECT count(*) FROM applied`)
			failed, _ := e.count(e.stockDB, `SELECT count(*) FROM platform.failed_event`)
			t.Fatalf("no %d retries waiting in %v: %v (alpha: %d applied, %d failed)", n/2, waitIn, e.vhostDepths(), applied, failed)
		}
		waiting := e.queueDepths(conn, waitIn...)
		d.kill()
		t.Logf("SIGKILL with %d retries waiting in %v", waiting, waitIn)
		if restartBroker {
			conn = e.restartBroker(conn)
			t.Logf("broker restarted: %d retries still waiting in %v", e.queueDepths(conn, waitIn...), waitIn)
		}
		// Daemon down: the delay queues still dead-letter into the pools'
		// queues.
		if !waitUntil(time.Minute, func() bool { return e.queueDepths(conn, waitIn...) == 0 }) {
			t.Fatalf("delay queues %v not emptied with the daemon down: %v", waitIn, e.vhostDepths())
		}
		t.Logf("daemon down, %v expired into the pools' queues: %d and %d ready", waitIn, e.queueDepths(conn, e.stockQ), e.queueDepths(conn, e.shipQ))
		d.start()
	}

	for _, svc := range []struct{ db, event string }{{e.stockDB, "chaos.alpha.v1"}, {e.shipDB, "chaos.beta.v1"}} {
		want := len(ids[svc.event])
		if !waitUntil(3*time.Minute, func() bool {
			got, err := e.count(svc.db, `SELECT count(*) FROM applied`)
			return err == nil && got >= want
		}) {
			got, _ := e.count(svc.db, `SELECT count(*) FROM applied`)
			t.Fatalf("%s applied %d of %d events: %v", svc.db, got, want, e.vhostDepths())
		}
		var fail, ok []string
		for _, id := range ids[svc.event] {
			if failing[id] {
				fail = append(fail, id)
			} else {
				ok = append(ok, id)
			}
		}
		for _, c := range []struct {
			what, q string
			args    []any
			want    int
		}{
			{"rows", `SELECT count(*) FROM applied`, nil, want},
			{"applied more than once", `SELECT count(*) FROM applied WHERE n <> 1`, nil, 0},
			{"retried events applied at attempt 2", `SELECT count(*) FROM applied WHERE attempt = 2 AND event_id = ANY($1::uuid[])`, []any{fail}, len(fail)},
			{"plain events applied at attempt 0", `SELECT count(*) FROM applied WHERE attempt = 0 AND event_id = ANY($1::uuid[])`, []any{ok}, len(ok)},
			{"processed_event rows", `SELECT count(*) FROM processed_event`, nil, want},
			{"stored failures", `SELECT count(*) FROM platform.failed_event`, nil, 0},
		} {
			got, err := e.count(svc.db, c.q, c.args...)
			if err != nil || got != c.want {
				t.Errorf("%s: %s: %d, want %d (%v)", svc.db, c.what, got, c.want, err)
			}
		}
	}
	if !waitUntil(30*time.Second, func() bool { return sum(e.vhostDepths()) == 0 }) {
		t.Errorf("queues not empty at the end: %v", e.vhostDepths())
	}
	restarts := ""
	if restartBroker {
		restarts = ", each followed by a broker restart,"
	}
	t.Logf("chaos: %d events per service (%d retried twice), 2 SIGKILLs%s with retries waiting in the shared delay queues: each applied once in its own service, none lost; queues: %v",
		n+plain, n, restarts, e.vhostDepths())
}

// restartBroker restarts the RabbitMQ application of the main node (its
// Erlang VM stays up): every connection closes, every queue is recovered
// from its data. It returns a new connection to the test's vhost in place
// of conn.
func (e *env) restartBroker(conn *amqp.Connection) *amqp.Connection {
	e.t.Helper()
	_ = conn.Close()
	start := time.Now()
	e.t.Cleanup(func() { _, _ = rabbitmqctl("start_app") }) // never leave the node stopped
	for _, args := range [][]string{{"stop_app"}, {"start_app"}, {"await_startup"}} {
		if out, err := rabbitmqctl(args...); err != nil {
			e.t.Fatalf("broker restart: %v: %s", err, out)
		}
	}
	var next *amqp.Connection
	if !waitUntil(time.Minute, func() bool {
		c, err := e.dialAMQP()
		next = c
		return err == nil
	}) {
		e.t.Fatal("broker not back a minute after its restart")
	}
	e.t.Logf("broker restarted in %.1fs", time.Since(start).Seconds())
	return next
}

// vhostDepths returns the messages (ready and unacknowledged) of every
// queue of the test's vhost, by name, as rabbitmqctl reports them: a
// quorum queue's figures are up to a statistics interval (5s) old.
func (e *env) vhostDepths() map[string]int {
	out, err := e.ctl("list_queues", "-p", e.vhost, "--quiet", "--no-table-headers", "name", "messages")
	if err != nil {
		e.t.Fatalf("%v", err)
	}
	depths := map[string]int{}
	for line := range strings.SplitSeq(out, "\n") {
		fs := strings.Fields(line)
		if len(fs) != 2 {
			continue
		}
		v, err := strconv.Atoi(fs[1])
		if err != nil {
			e.t.Fatalf("list_queues: %q", line)
		}
		depths[fs[0]] = v
	}
	return depths
}

// queueDepths sums the ready messages of the named queues of the test's
// vhost, read with passive declares on conn (rabbitmqctl takes a second
// or more per call: longer than a retry waits).
func (e *env) queueDepths(conn *amqp.Connection, names ...string) int {
	total := 0
	for _, name := range names {
		ch, err := conn.Channel()
		if err != nil {
			e.t.Fatalf("channel: %v", err)
		}
		q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		if err == nil {
			total += q.Messages
			_ = ch.Close()
		}
	}
	return total
}

func sum(depths map[string]int) int {
	total := 0
	for _, v := range depths {
		total += v
	}
	return total
}
