// Package shop is the seed article's online shop as platformd handlers: the
// stock service reserves goods for each order line when an order is placed
// and announces it through its outbox (stock.stock.reserved.v1); the
// shipping service keeps a copy of each order's status, applying only newer
// versions, and prepares a parcel for each order whose stock is reserved.
// The order service, the producer, has no handler: OrderMigrations holds its
// table.
//
// Both handlers only touch the service's database through the transaction
// they are given, so platformd's dedup step makes their effects happen once
// per event. The reservation insert is cumulative (not idempotent by
// itself): it is exactly the effect a duplicate delivery would double.
package shop

import (
	"embed"
	"io/fs"

	"github.com/platformd/platformd/consumer"
)

// Event names and handler names of the shop.
const (
	EventOrderPlaced        = "order.order.placed.v1"
	EventOrderStatusChanged = "order.order.status_changed.v1"
	EventStockReserved      = "stock.stock.reserved.v1"
	HandlerStockReserve     = "stock.reserve"
	HandlerShippingTrack    = "shipping.track_status"
	// HandlerStockAnnounce emits EventStockReserved through the outbox.
	HandlerStockAnnounce = "stock.announce_reserved"
	// HandlerShippingParcel prepares a parcel on EventStockReserved.
	HandlerShippingParcel = "shipping.prepare_parcel"
)

// OrderMigrations returns the order service's goose migrations (its orders
// table), which no handler carries: the demo applies them itself.
func OrderMigrations() fs.FS { return sub("order") }

//go:embed migrations
var migrationFiles embed.FS

func sub(dir string) fs.FS {
	f, err := fs.Sub(migrationFiles, "migrations/"+dir)
	if err != nil {
		panic(err) // the embed pattern guarantees the folders
	}
	return f
}

// Register adds the shop's handlers to reg; it stops at the first that
// reg refuses.
func Register(reg *consumer.Registry) error {
	for _, r := range []consumer.Registration{
		{Name: HandlerStockReserve, Events: []string{EventOrderPlaced}, Handler: batchFunc(reserve), Migrations: sub("stock")},
		{Name: HandlerShippingTrack, Events: []string{EventOrderStatusChanged}, Handler: batchFunc(track), Migrations: sub("shipping")},
		{Name: HandlerStockAnnounce, Events: []string{EventOrderPlaced}, Handler: consumer.HandlerFunc(AnnounceReserved)},
		{Name: HandlerShippingParcel, Events: []string{EventStockReserved}, Handler: consumer.HandlerFunc(PrepareParcel), Migrations: sub("parcel")},
	} {
		if err := reg.Register(r); err != nil {
			return err
		}
	}
	return nil
}
