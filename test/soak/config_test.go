package soak

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/platformd/platformd/internal/faultproxy"
)

// Names of the run's exchange, services, pools and queues.
const (
	exchange      = "soak.events"
	evPlaced      = "order.order.placed.v1"
	evStatus      = "order.order.status_changed.v1"
	evInvoice     = "billing.invoice.opened.v1"
	poolStock     = "stock-events"
	poolShipping  = "shipping-events"
	poolBilling   = "billing-events"
	poolInvoices  = "ledger-invoices"
	poolLedgerSeq = "ledger-status"
	tapQueue      = "soak.tap"
)

// Service databases on the private server.
var serviceDBs = []string{"order", "stock", "shipping", "billing", "ledger"}

const billingMigration = `-- +goose Up
CREATE TABLE invoice (
    id       bigserial PRIMARY KEY,
    event_id uuid NOT NULL,   -- no unique key: an event applied twice shows as two rows
    order_id uuid NOT NULL,
    lines    int  NOT NULL
);
CREATE INDEX invoice_event ON invoice (event_id);
-- +goose Down
DROP TABLE invoice;
`

const ledgerMigration = `-- +goose Up
CREATE TABLE entry (
    id       bigserial PRIMARY KEY,   -- the order of application
    kind     text NOT NULL,
    event_id uuid NOT NULL,           -- no unique key: twice shows as two rows
    order_id uuid NOT NULL,
    version  int,
    attempt  int  NOT NULL
);
CREATE INDEX entry_event ON entry (event_id);
-- +goose Down
DROP TABLE entry;
`

const configTemplate = `log: {level: info, format: json}
admin:
  listen: {{ADMIN}}
  tokens:
    - {name: ops, role: admin, token: "${SOAK_ADMIN_TOKEN}"}
metrics: {listen: {{METRICS}}}
broker: {urls: [{{URLS}}], exchange: ` + exchange + `}
services:
  - name: order
    database: "{{DB_order}}"
    outbox: {relay: true, batch_size: 200, poll: 200ms, archive: 24h}
  - name: stock
    database: "{{DB_stock}}"
    horizon: 48h
    min_horizon: 24h
    purge: {every: 2m, batch_size: 1000}
    pools:
      - name: stock-events
        queue: soak.stock
        queue_type: quorum
        bindings: [order.order.placed.v1]
        handlers: [stock.reserve]
        concurrency: {{STOCK_CONC}}
        batch: {size: 100, wait: 5ms}
        retry: {delays: [1s, 2s, 4s]}
  - name: shipping
    database: "{{DB_shipping}}"
    horizon: 48h
    min_horizon: 24h
    purge: {every: 2m, batch_size: 1000}
    pools:
      - name: shipping-events
        queue: soak.shipping
        queue_type: quorum
        bindings: [order.order.status_changed.v1]
        handlers: [shipping.track_status]
        concurrency: 2
        partition_key: /order_id
        batch: {size: 100, wait: 5ms}
        retry: {delays: [1s, 2s, 4s]}
  - name: billing
    database: "{{DB_billing}}"
    migrations: "{{MIG}}/billing"
    horizon: 48h
    min_horizon: 24h
    outbox: {relay: true, batch_size: 200, poll: 200ms, archive: 24h}
    remote_handlers:
      - name: billing.open_invoice
        events: [order.order.placed.v1]
        url: "{{REMOTE}}"
        timeout: 2s
        statements:
          open_invoice: |
            INSERT INTO invoice (event_id, order_id, lines) VALUES (@event_id, @order_id::uuid, @lines::int)
    pools:
      - name: billing-events
        queue: soak.billing
        queue_type: quorum
        bindings: [order.order.placed.v1]
        handlers: [billing.open_invoice]
        concurrency: 2
        batch: {size: 50, wait: 5ms}
        retry: {delays: [1s, 2s, 4s]}
  - name: ledger
    database: "{{DB_ledger}}"
    migrations: "{{MIG}}/ledger"
    horizon: 48h
    min_horizon: 24h
    sql_handlers:
      - name: ledger.record_invoice
        events: [billing.invoice.opened.v1]
        sql:
          - INSERT INTO entry (kind, event_id, order_id, attempt) VALUES ('invoice', @event_id, (@payload->>'order_id')::uuid, @attempt)
      - name: ledger.record_status
        events: [order.order.status_changed.v1]
        sql:
          - INSERT INTO entry (kind, event_id, order_id, version, attempt) VALUES ('status', @event_id, (@payload->>'order_id')::uuid, (@payload->>'version')::int, @attempt)
    pools:
      - name: ledger-invoices
        queue: soak.ledger.invoices
        queue_type: quorum
        bindings: [billing.invoice.opened.v1]
        handlers: [ledger.record_invoice]
        concurrency: 2
        batch: {size: 100, wait: 5ms}
        retry: {delays: [1s, 2s, 4s]}
{{ORDERED}}`

// orderedPool runs on daemon a only: a key's order holds within one
// daemon (docs/hosting.md), not across two sharing a queue.
const orderedPool = `      - name: ledger-status
        queue: soak.ledger.status
        queue_type: quorum
        bindings: [order.order.status_changed.v1]
        handlers: [ledger.record_status]
        concurrency: 2
        partition_key: /order_id
        batch: {size: 100, wait: 5ms}
        retry: {delays: [1s, 2s, 4s]}
`

// writeMigrations writes the billing and ledger services' own tables.
func (w *world) writeMigrations() string {
	mig := filepath.Join(w.dir, "migrations")
	for dir, sql := range map[string]string{"billing": billingMigration, "ledger": ledgerMigration} {
		if err := os.MkdirAll(filepath.Join(mig, dir), 0o755); err != nil {
			w.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mig, dir, "001_"+dir+".sql"), []byte(sql), 0o644); err != nil {
			w.t.Fatal(err)
		}
	}
	return mig
}

// newDaemon prepares daemon name (not started). ordered puts the
// partitioned ledger pool on it; viaProxy puts a fault proxy in front of
// each broker node (for lost acks).
func (w *world) newDaemon(name string, ordered, viaProxy bool) *daemon {
	d := &daemon{w: w, name: name, adminAddr: freePort(w.t), metricsAddr: freePort(w.t),
		cfgPath: filepath.Join(w.dir, name+".yaml"), logPath: filepath.Join(w.dir, "daemon-"+name+".log")}
	if viaProxy {
		for _, u := range w.nodes {
			pu, err := parseHost(u)
			if err != nil {
				w.t.Fatal(err)
			}
			p, err := faultproxy.New(pu, faultproxy.Options{})
			if err != nil {
				w.t.Fatal(err)
			}
			w.t.Cleanup(p.Close)
			d.proxies = append(d.proxies, p)
		}
	}
	d.ordered = ordered
	d.writeConfig(3)
	return d
}

// writeConfig writes the daemon's config with the stock pool's
// concurrency (a reload changes it).
func (d *daemon) writeConfig(stockConc int) {
	w := d.w
	var urls []string
	for i, u := range w.nodes {
		if len(d.proxies) > 0 {
			u = strings.Replace(u, mustHost(u), d.proxies[i].Addr(), 1)
		}
		urls = append(urls, strconv.Quote(u))
	}
	repl := []string{"{{ADMIN}}", d.adminAddr, "{{METRICS}}", d.metricsAddr, "{{URLS}}", strings.Join(urls, ", "),
		"{{MIG}}", filepath.Join(w.dir, "migrations"), "{{REMOTE}}", w.remote.url(),
		"{{STOCK_CONC}}", strconv.Itoa(stockConc), "{{ORDERED}}", ""}
	if d.ordered {
		repl[len(repl)-1] = orderedPool
	}
	for _, db := range serviceDBs {
		repl = append(repl, "{{DB_"+db+"}}", w.dsn(db))
	}
	cfg := strings.NewReplacer(repl...).Replace(configTemplate)
	if err := os.WriteFile(d.cfgPath, []byte(cfg), 0o600); err != nil {
		w.t.Fatal(err)
	}
}

func parseHost(u string) (string, error) {
	h := mustHost(u)
	if h == "" {
		return "", fmt.Errorf("no host in %q", u)
	}
	return h, nil
}

// mustHost is the host:port of an AMQP URL ("" if none).
func mustHost(u string) string {
	rest, ok := strings.CutPrefix(u, "amqp://")
	if !ok {
		return ""
	}
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		rest = rest[i+1:]
	}
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		rest = rest[:i]
	}
	return rest
}
