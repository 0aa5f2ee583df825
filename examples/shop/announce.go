package shop

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/consumer"
)

// StockReserved is the payload of stock.stock.reserved.v1: the order whose
// lines the stock service reserved, with order.order.placed.v1's fields.
type StockReserved OrderPlaced

// AnnounceReserved is the stock.announce_reserved handler: it tells the
// other services that an order's stock is reserved by writing
// stock.stock.reserved.v1 to the stock service's outbox, in the batch's
// transaction. It runs beside stock.reserve on the same event, so the
// message leaves only if the reservation committed, once per event, and
// platformd's relay publishes it after the commit.
func AnnounceReserved(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	o, err := decodeOrder(HandlerStockAnnounce, ev)
	if err != nil {
		return err
	}
	_, err = consumer.Publish(ctx, tx, consumer.Message{
		Name:    EventStockReserved,
		Payload: StockReserved(o),
	})
	if err != nil {
		return fmt.Errorf("stock.announce_reserved: event %s: %w", ev.ID, err)
	}
	return nil
}

// parcelSQL creates one parcel per order, its id a UUID v7 made by the
// handler.
const parcelSQL = `INSERT INTO parcel (id, order_id, customer_id, items, created_at) VALUES ($1, $2, $3, $4, now())`

// PrepareParcel is the shipping.prepare_parcel handler: one parcel per
// stock.stock.reserved.v1, holding the order's lines. The insert is
// cumulative; platformd's dedup step makes it happen once per event.
func PrepareParcel(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	r, err := decodeOrder(HandlerShippingParcel, ev)
	if err != nil {
		return err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return fmt.Errorf("shipping.prepare_parcel: parcel id: %w", err)
	}
	if _, err := tx.Exec(ctx, parcelSQL, [16]byte(id), [16]byte(r.OrderID), [16]byte(r.CustomerID), int32(len(r.Lines))); err != nil {
		return fmt.Errorf("shipping.prepare_parcel: insert parcel of order %s: %w", r.OrderID, err)
	}
	return nil
}
