// Package main is a billing service's own platformd: a module outside the
// platformd repository that imports only its public packages, consumer
// and daemon, registers its Go handler with its migrations, and runs the
// stock command line over them:
//
//	billing migrate -config platformd.yaml -create-db
//	billing run     -config platformd.yaml
//
// CI builds it and runs its test, so the embedding API stays usable from
// outside.
package main

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/platformd/platformd/consumer"
)

// Names of the event and of the handler (the config's pools reference
// the handler).
const (
	EventOrderPlaced   = "order.order.placed.v1"
	HandlerOpenInvoice = "billing.open_invoice"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the goose migrations of the handler's tables.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		panic(err) // the embed pattern guarantees the folder
	}
	return sub
}

// orderPlaced is the part of the order.order.placed.v1 payload billing
// reads.
type orderPlaced struct {
	OrderID    string `json:"order_id"`
	CustomerID string `json:"customer_id"`
	Lines      []struct {
		ProductID string          `json:"product_id"`
		Quantity  json.RawMessage `json:"quantity"`
	} `json:"lines"`
}

// openInvoiceSQL opens the order's invoice. PostgreSQL checks the uuids
// and the quantities: a malformed one fails with SQLSTATE class 22.
const openInvoiceSQL = `INSERT INTO invoice (order_id, customer_id, event_id, lines, quantity, opened_at)
SELECT $1::uuid, $2::uuid, $3, $4, coalesce(sum(q::numeric(12,3)), 0), $5
FROM unnest($6::text[]) AS q`

// OpenInvoice is the billing.open_invoice handler: one invoice per order,
// in the transaction that records the event as processed. A payload it
// cannot read is a permanent error: the event is stored as a failure
// instead of being retried.
func OpenInvoice(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	var o orderPlaced
	if err := json.Unmarshal(ev.Payload, &o); err != nil {
		return consumer.Permanent(fmt.Errorf("payload: %w", err))
	}
	if o.OrderID == "" || o.CustomerID == "" || len(o.Lines) == 0 {
		return consumer.Permanent(errors.New("payload: order_id, customer_id and at least one line are required"))
	}
	quantities := make([]string, len(o.Lines))
	for i, l := range o.Lines {
		var q string
		if err := json.Unmarshal(l.Quantity, &q); err != nil {
			return consumer.Permanent(fmt.Errorf("payload: lines[%d].quantity: a decimal string is required", i))
		}
		quantities[i] = q
	}
	_, err := tx.Exec(ctx, openInvoiceSQL, o.OrderID, o.CustomerID, [16]byte(ev.ID), len(o.Lines), ev.OccurredAt, quantities)
	if err != nil {
		err = fmt.Errorf("open invoice of order %s: %w", o.OrderID, err)
		// A value PostgreSQL refuses (class 22: "abc" as a uuid or a
		// number) or a constraint the content breaks (class 23) will be
		// refused again: no retry can help. Anything else may pass later.
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgerrcode.IsDataException(pgErr.Code) || pgerrcode.IsIntegrityConstraintViolation(pgErr.Code)) {
			return consumer.Permanent(err)
		}
		return err
	}
	return nil
}

// register adds billing's handlers to reg.
func register(reg *consumer.Registry) error {
	return reg.Register(consumer.Registration{
		Name:       HandlerOpenInvoice,
		Events:     []string{EventOrderPlaced},
		Handler:    consumer.HandlerFunc(OpenInvoice),
		Migrations: Migrations(),
	})
}
